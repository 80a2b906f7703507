"""One harness run: a domain's rows through one agent worker, into one folder.

The harness is trusted: it sends each row's *inputs* (never its labels, nor its id: a token
stands for it, scheduler.py) to the worker, which runs the agent in its sandbox, and writes what
comes back under the row's id. A folder that holds a journal is resumed: its finished rows are
skipped and paid nothing for. The journal keeps each row's token too, which names its transcript
in the sandbox's folder (`chat_history_<token>.md`): a transcript is found by the row's id there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domains.harness.journal import JOURNAL, PREDICTIONS, Journal, write_predictions
from domains.harness.scheduler import Row, Scheduler
from domains.harness.worker_client import AgentWorker
from services.errors import UserError
from services.fsutil import atomic_write_json, make_folder
from services.ledger import Totals
from services.render import console

if TYPE_CHECKING:  # a Domain is only passed through here: no need to import pandas with it
    from collections.abc import Iterator

    import pandas as pd
    from tqdm import tqdm

    from domains.base import Domain
    from services.config import HarnessConfig
    from services.gateway import Gateway

RUN_SCHEMA = 1  # the shape of an evaluation folder's run.json (written for people and tools; never read back)


@dataclass
class SplitResult:
    domain: Domain  # whose rows were run
    folder: Path  # holds predictions.csv, predictions.jsonl and run.json
    rows: int
    done: int  # rows answered without an error
    errors: int
    not_run: int
    stopped_by: str | None  # why rows were left unsent (the budget), or None
    spent: Totals  # the gateway's totals when the run ended (the whole run's, for a shared gateway)

    def line(self, whose: str = "cost") -> str:
        return (f"{self.done}/{self.rows} rows done, {self.errors} errors, {whose} ${self.spent.cost_usd:.4f} "
                f"({self.spent.calls} calls, {self.spent.cache_hits} from the response cache); "
                f"predictions: {self.folder / PREDICTIONS}")

    def stop_message(self) -> str:
        return (f"{self.stopped_by}; {self.not_run + self.errors} rows not evaluated: "
                f"raise the budget and rerun with --resume_from {self.folder}")



def run_record(result: SplitResult, agent_path: str, asked: dict | None, model: str, sandbox: str,
               started_at: str, finished_at: str) -> dict:
    """An evaluation folder's run.json: what was asked (subset, num_samples, ...) and what came of it.
    Pure, so that whatever else writes an evaluation folder (the tests' synthetic runs) writes the same."""
    return {"schema_version": RUN_SCHEMA, "domain": result.domain.name, "agent_path": agent_path, **(asked or {}),
            "model": model, "sandbox": sandbox, "started_at": started_at, "rows": result.rows, "done": result.done,
            "errors": result.errors, "not_run": result.not_run, "stopped_by": result.stopped_by,
            "finished_at": finished_at, "cost_usd": round(result.spent.cost_usd, 6),
            "prompt_tokens": result.spent.prompt_tokens, "completion_tokens": result.spent.completion_tokens,
            "llm_calls": result.spent.calls, "cache_hits": result.spent.cache_hits}

@contextlib.contextmanager
def run_folder(path: Path) -> Iterator[Path]:
    """`path`, made if missing. A folder made here is removed again when a UserError ends the run
    before any row finished, so a run that could not start leaves nothing behind."""
    created = not path.exists()
    make_folder(path)
    try:
        yield path
    except UserError:
        if created and not (path / JOURNAL).exists():
            shutil.rmtree(path, ignore_errors=True)
        raise


def run_split(domain: Domain, rows: pd.DataFrame, worker: AgentWorker, out_dir: Path, *, label: str | None = None,
              show_progress: bool = True, asked: dict | None = None) -> SplitResult:
    """Evaluate the agent of `worker` on `rows` (a DataFrame of `domain`'s data) into `out_dir`.

    The worker may be running already or not yet started; the calls of the agent go through
    its gateway, and the harness settings are its config's (one set for both ends of the
    pipe). Rows finished in an earlier run in `out_dir` are kept. `asked` is what the caller
    asked for (subset, num_samples, ...), kept in run.json with the outcome; `label` names
    the progress bar.
    """
    settings, gateway = worker.config.harness, worker.gateway
    started_at = datetime.now().isoformat(timespec="seconds")
    with run_folder(out_dir):
        journal = Journal(out_dir / JOURNAL, max_prediction_bytes=settings.max_prediction_bytes)
        keep = _Keeper(journal, domain, rows, out_dir, settings, gateway)
        try:
            stopped_by = _run_rows(domain, rows, worker, keep, label or domain.name, show_progress)
        finally:
            journal.close()
            keep.save()
        recs = [journal.records.get(str(q)) for q in rows[domain.question_id]]
        spent = gateway.spent()
        result = SplitResult(domain, out_dir, len(rows), done=sum(1 for r in recs if r and not r.get("error")),
                             errors=sum(1 for r in recs if r and r.get("error")),
                             not_run=sum(1 for r in recs if r is None), stopped_by=stopped_by, spent=spent)
        atomic_write_json(out_dir / "run.json", run_record(result, worker.agent_path, asked, worker.model,
                                                           worker.sandbox.name, started_at,
                                                           datetime.now().isoformat(timespec="seconds")))
    return result


def _run_rows(domain: Domain, rows: pd.DataFrame, worker: AgentWorker, keep: _Keeper, label: str,
              show_progress: bool) -> str | None:
    """Every row the journal does not hold as done, through the worker; returns why it stopped early."""
    from tqdm import tqdm

    qid_col = domain.question_id
    asked = [Row(str(r[qid_col]), domain.format_inputs(r)) for r in rows.to_dict("records")]
    keep.fingerprints = {row.qid: fingerprint(row.inputs) for row in asked}
    done = keep.journal.done_ids()
    # A row is done only if it was answered for the inputs it has now: a proof that changed since
    # (a graded task run redone after a kill) is graded again, not given its old grade.
    todo = [row for row in asked
            if row.qid not in done or keep.journal.records[row.qid].get("inputs_sha", keep.fingerprints[row.qid])
            != keep.fingerprints[row.qid]]
    if todo:
        worker.ensure_started()
    # After the agent loaded, so a load error is the only thing on the screen.
    # `disable` only when asked, so TQDM_DISABLE=1 (set for each of --replicates' processes) turns bars off.
    quiet: dict[str, Any] = {} if show_progress else {"disable": True}
    keep.bar = tqdm(total=len(rows), initial=len(rows) - len(todo), unit="row", dynamic_ncols=True,
                    desc=console(label, 80), **quiet)
    try:
        settings = worker.config.harness
        return Scheduler(worker, settings.num_workers, settings.row_timeout_s, keep,
                         worker.gateway.budget_left_message).run(todo)
    finally:
        keep.bar.close()


def fingerprint(inputs: dict) -> str:
    """A short hash of a row's inputs as the agent sees them."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _Keeper:
    """Keeps each finished row: in the journal at once, in predictions.csv every `save_interval` rows."""

    def __init__(self, journal: Journal, domain: Domain, rows: pd.DataFrame, out_dir: Path, settings: HarnessConfig,
                 gateway: Gateway) -> None:
        self.journal = journal
        self.domain = domain
        self.rows = rows
        self.out_dir = out_dir
        self.settings = settings
        self.gateway = gateway
        self.bar: tqdm  # the progress bar, set before the first row
        self.fingerprints: dict[str, str] = {}  # row id -> fingerprint of the inputs it was sent
        self.errors = 0
        self.unsaved = 0

    def __call__(self, rec: dict) -> None:
        self.journal.append({**rec, "inputs_sha": self.fingerprints.get(str(rec.get("id")))})
        self.errors += bool(rec.get("error"))
        self.unsaved += 1
        self.bar.update(1)
        spent = self.gateway.spent()
        saved = f" (${spent.cache_saved_usd:.4f} saved by prompt caching)" if spent.cache_saved_usd > 0 else ""
        self.bar.set_postfix_str(f"cost ${spent.cost_usd:.4f}{saved}, errors {self.errors}", refresh=False)
        if self.unsaved >= self.settings.save_interval:
            self.save()

    def save(self) -> None:
        write_predictions(self.rows, self.domain.question_id, self.journal, self.out_dir / PREDICTIONS,
                          self.settings.max_prediction_bytes)
        self.unsaved = 0
