"""The evaluation harness: run a task agent over a data set split, through the gateway.

The harness is trusted: it reads the data, sends each row's *inputs* (never its
labels) to a worker process that loads the agent, and writes what comes back. Every
finished row is appended to `predictions.jsonl` at once, so a killed run loses only
the rows in flight; `predictions.csv` (the seed's output format) is rewritten
atomically every `save_interval` rows and at the end. `--resume_from DIR` skips the
rows that are done and pays nothing for them.

    python -m domains.harness --domain imo_grading --subset _filtered_100_train \
        --num_samples 10 --run_id initial_imo_grading_filtered_100_train_0
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import queue
import shutil
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from inside.worker import USAGE_KEYS, utf8_text
from services.config import (
    PROJECT_ROOT,
    ROLE_ALIASES,
    SANDBOX_BACKENDS,
    Config,
    load_config,
    parse_data_flags,
)
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_csv, atomic_write_json
from services.sandbox import Mount, choose_backend, open_sandbox
from services.workspace import EVOLVABLE_PATHS, copy_evolvable

AGENT_PACKAGES = "/opt/agent_packages"  # where installed agent packages are mounted inside
RESULT_COLUMNS = ["prediction", "error", "seconds", "prompt_tokens", "completion_tokens", "cost_usd"]
MAX_ROW_ATTEMPTS = 2  # a row in flight when the worker died is sent once more
# Rows sent ahead of free worker threads, so a thread that finishes finds its next row
# already queued in the worker instead of waiting a round trip through the harness.
PREFETCH_ROWS = 2
MAX_ERROR_CHARS = 4000  # of a row's error as a worker reports it (predictions.csv shows its first line)


@dataclass
class Row:
    qid: str
    inputs: dict
    attempts: int = 0
    started: float | None = None  # when a worker thread took it up; None while queued there


class Journal:
    """Append-only record of finished rows; the last record of an id wins."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                self.records[str(rec["id"])] = rec
        self._file = None

    def done_ids(self) -> set[str]:
        return {qid for qid, rec in self.records.items() if not rec.get("error")}

    def append(self, rec: dict) -> None:
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.write(json.dumps(rec, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records[str(rec["id"])] = rec

    def close(self) -> None:
        if self._file:
            self._file.close()


class ProtocolError(Exception):
    """A message the worker never writes: agent code, which runs in the worker, wrote it."""


def _row_id(value) -> str:
    if type(value) not in (str, int):
        raise ProtocolError(f"a row id of type {type(value).__name__}")
    return str(value)


def _amount(value) -> bool:
    """A non-negative finite number as JSON gives it (True is not one)."""
    return type(value) in (int, float) and 0 <= value < math.inf


def _usage(value) -> dict:
    """The known counts of a usage report; none at all if one is not an amount."""
    if type(value) is not dict:
        return {}
    usage = {k: value[k] for k in USAGE_KEYS if k in value}
    return usage if all(map(_amount, usage.values())) else {}


def _append(log, text: str):
    """Write to the log; None once that fails (a full disk), so the copy reads on and drops the rest."""
    if log is not None:
        try:
            log.write(text)
            log.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                log.close()
            return None
    return log


class WorkerProcess:
    """One worker speaking JSON lines inside a sandbox; reader threads feed `results` and the log.

    Its stderr (where agent prints land) is copied to `log_path` up to `log_cap` bytes;
    past that the worker is killed, so a flood of output cannot fill the disk.
    Its stdout is hostile too, since agent code in the worker can write to any descriptor:
    lines are read with a bound, and a message the worker never writes (not a JSON object,
    a field of the wrong type, a prediction over the cap, a row not in the state the message
    implies) kills the worker; `violation` says why, and its rows fail with that after their
    retries.
    """

    def __init__(self, proc, log_path: Path, log_cap: int, results: queue.Queue, max_prediction_bytes: int,
                 sandbox=None):
        self.proc = proc
        self.sandbox = sandbox  # whose disk watch may have killed it (Sandbox.disk_capped)
        self.log_path = log_path
        self.log_cap = log_cap
        self.overflowed = False
        self.results = results
        self.max_prediction_bytes = max_prediction_bytes
        self.violation: str | None = None
        self._ready = False
        self._waiting: set[str] = set()  # rows sent and not started: only these may start
        self._running: set[str] = set()  # rows started and not answered: only these may be answered
        threading.Thread(target=self._read, daemon=True).start()
        self._log_thread = threading.Thread(target=self._copy_log, args=(log_path,), daemon=True)
        self._log_thread.start()

    def _read(self) -> None:
        # A line holds one capped prediction, each byte of which JSON may spell in up to 6
        # characters (a control character as \u00XX), and a few short fields.
        limit = 6 * self.max_prediction_bytes + 65536
        try:
            while line := self.proc.stdout.readline(limit):
                if not line.endswith("\n"):
                    if len(line) >= limit:
                        raise ProtocolError(f"a line of more than {limit} characters")
                    break  # the worker died in the middle of a line
                self.results.put((self, self._message(line)))
        except ProtocolError as e:
            self.violation = str(e)  # before the kill: whoever sees the worker dead reads it
            self.proc.kill()
        except (OSError, ValueError):
            pass  # the pipe was closed under us
        self.results.put((self, {"exited": True}))

    def _message(self, line: str) -> dict:
        """A line's message with only the fields of its kind, each checked; ProtocolError if the
        worker never writes it."""
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            raise ProtocolError("a line that is not JSON") from None
        if type(msg) is not dict:
            raise ProtocolError("a line that is not a JSON object")
        if "id" in msg:
            return self._answer(msg)
        if "started" in msg:
            qid = _row_id(msg["started"])
            if qid not in self._waiting:
                raise ProtocolError(f"a start of row {qid[:100]!r}, which is not waiting to start")
            self._waiting.discard(qid)
            self._running.add(qid)
            return {"started": qid}
        if not self._ready and msg.get("ready") is True:
            self._ready = True
            return {"ready": True}
        if not self._ready and type(msg.get("fatal")) is str:
            return {"fatal": utf8_text(msg["fatal"][:MAX_ERROR_CHARS])[0]}
        raise ProtocolError("a message of no known kind")

    def _answer(self, msg: dict) -> dict:
        qid = _row_id(msg["id"])
        if qid not in self._running:
            raise ProtocolError(f"an answer for row {qid[:100]!r}, which is not running")
        prediction, error, seconds = msg.get("prediction"), msg.get("error"), msg.get("seconds")
        if prediction is not None:
            if type(prediction) is not str:
                raise ProtocolError("a prediction that is not a string")
            prediction, size = utf8_text(prediction)
            if size > self.max_prediction_bytes:
                raise ProtocolError(f"a prediction of {size} bytes, over the cap of {self.max_prediction_bytes}")
        if error is not None:
            if type(error) is not str:
                raise ProtocolError("an error that is not a string")
            error = utf8_text(error[:MAX_ERROR_CHARS])[0]
        if seconds is not None and not _amount(seconds):
            raise ProtocolError("seconds that are not a number")
        self._running.discard(qid)
        return {"id": qid, "prediction": prediction, "error": error, "usage": _usage(msg.get("usage")),
                "seconds": seconds}

    def _copy_log(self, log_path: Path) -> None:
        # Reads stderr to its end whatever the log file does: a worker blocked on a full pipe
        # would stall its rows until they time out.
        try:
            log = open(log_path, "a", encoding="utf-8", errors="backslashreplace")
        except OSError:
            log = None
        written = 0
        try:
            for chunk in iter(lambda: self.proc.stderr.read(65536), ""):
                if written < self.log_cap:
                    log = _append(log, chunk[: self.log_cap - written])
                written += len(chunk)
                if written > self.log_cap and not self.overflowed:
                    self.overflowed = True
                    log = _append(log, f"\n[harness] output cap of {self.log_cap} bytes exceeded: worker killed\n")
                    self.proc.kill()
        except (OSError, ValueError):
            pass  # the pipe was closed under us
        finally:
            if log is not None:
                with contextlib.suppress(OSError):
                    log.close()

    def death_reason(self) -> str:
        if self.violation:
            return f"protocol violation: the worker wrote {self.violation}; it was killed"
        if self.overflowed:
            return f"the worker was killed for printing more than {self.log_cap} bytes (see {self.log_path.name})"
        if getattr(self.sandbox, "disk_capped", None):
            return f"the worker was killed for {self.sandbox.disk_capped}"
        return f"the worker died while running this row (see {self.log_path.name})"

    def go(self) -> None:
        """Let a worker started with --wait_for_go load the agent."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def send(self, row: Row) -> None:
        self._waiting.add(row.qid)  # before the worker can see it, so its start is never early
        try:
            self.proc.stdin.write(json.dumps({"id": row.qid, "inputs": row.inputs}) + "\n")
            self.proc.stdin.flush()
        except OSError:  # it died, or agent code closed its input: killed, its rows are retried
            self.proc.kill()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        self._log_thread.join(5)


def load_rows(domain, subset: str | None, proofs_dname: str | None, num_samples: int):
    """The data set to evaluate, cut to `num_samples` rows (-1 = all), as the seed does."""
    from domains.imo.data import load_csv

    if domain.data_dir is None and domain.loader is None:
        if not proofs_dname:
            raise UserError(f"domain {domain.name} grades another run's proofs: pass --proofs_dname RUN_DIR")
        source = Path(proofs_dname) / "predictions.csv"
        proofs = load_csv(source, [domain.question_id, "Problem", "prediction"])
        dataset = proofs.drop(columns=[c for c in RESULT_COLUMNS if c in proofs.columns])
        dataset["Response"] = proofs["prediction"]
        missing = [c for c in domain.required_columns() if c not in dataset.columns]
        if missing:
            raise UserError(f"{source} lacks column(s) {', '.join(missing)} needed by {domain.name}")
    else:
        dataset = domain.load(subset)
    if dataset[domain.question_id].duplicated().any():
        dup = dataset[domain.question_id][dataset[domain.question_id].duplicated()].iloc[0]
        raise UserError(f"question id {dup!r} appears twice in column {domain.question_id!r}")
    return dataset if num_samples is None or num_samples < 0 else dataset.head(num_samples)


def worker_env(sandbox, gateway_url: str, gateway_key: str, models: tuple[str, ...] = ()) -> dict:
    """The worker's whole environment: no provider key, only the gateway's address and key.

    `models` are the models agent code there calls; those that answer usably only under
    constrained decoding (local ones) are named in AGENT_STRUCTURED_MODELS for agent/llm.py.
    """
    from services.local_model import is_local

    env = sandbox.base_env()
    env["AGENT_STRUCTURED_MODELS"] = ",".join(m for m in models if is_local(m))
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        AGENT_GATEWAY_URL=gateway_url,
        AGENT_GATEWAY_KEY=gateway_key,
        # Unchanged litellm/openai code that ignores our variables still lands on the gateway.
        OPENAI_API_BASE=gateway_url,
        OPENAI_BASE_URL=gateway_url,
        OPENAI_API_KEY=gateway_key,
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def worker_mounts(transcripts: Path) -> list:
    """What a sandboxed worker needs besides the trusted scripts every sandbox has: its transcripts
    folder, writable."""
    return [Mount(transcripts, "/out/agent_evals", writable=True)]


def is_project_agent(agent_path: str) -> bool:
    """Whether the agent is this project's evolvable code (or a file that may import it)
    rather than an installed package such as `proofgrader`."""
    from inside.worker import is_file_path

    return is_file_path(agent_path) or agent_path.split(".")[0] in EVOLVABLE_PATHS


def agent_mounts(agent_path: str, workspace: Path) -> tuple[list, Path | None]:
    """What the sandbox needs mounted to load the agent: (mounts, the agent's .py file or None).

    A module in the workspace needs nothing. A `.py` file is mounted alone, read-only;
    an installed package (e.g. `proofgrader`) has its folder mounted read-only under
    AGENT_PACKAGES, since an editable install points outside anything the sandbox sees.
    """
    from inside.worker import is_file_path

    if is_file_path(agent_path):
        path = Path(agent_path).resolve()
        if not path.is_file():
            raise UserError(f"--agent_path {agent_path}: no such file")
        return [Mount(path, f"/opt/agent_file/{path.name}")], path
    top = agent_path.split(".")[0]
    if (workspace / top).is_dir() or (workspace / f"{top}.py").is_file():
        return [], None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not (spec.origin or spec.submodule_search_locations):
        raise UserError(f"--agent_path {agent_path}: no module {top!r} in the workspace or installed")
    locations = list(spec.submodule_search_locations or [])
    source = Path(locations[0]) if locations else Path(spec.origin)
    return [Mount(source, f"{AGENT_PACKAGES}/{source.name}")], None


def _prediction_cells(rec: dict, cap: int) -> tuple[str | None, str | None]:
    """A record's (prediction, error) as predictions.csv shows them: encodable text within the cap."""
    prediction, error = rec.get("prediction"), rec.get("error")
    if prediction is None:
        return None, error
    text, size = utf8_text(str(prediction))
    if size > cap:  # a journal resumed under a smaller cap than it was written with
        return None, error or f"prediction of {size} bytes is over the cap of {cap}"
    return text, error


def write_predictions(dataset, qid_col: str, journal: Journal, path: Path, max_prediction_bytes: int) -> None:
    """The seed's predictions.csv: the data set's columns plus what each row produced."""
    df = dataset.copy()
    recs = [journal.records.get(str(q), {}) for q in df[qid_col]]
    usage = [r.get("usage") or {} for r in recs]
    cells = [_prediction_cells(r, max_prediction_bytes) for r in recs]
    df["prediction"] = [prediction for prediction, _ in cells]
    df["error"] = [(error or "").split("\n")[0] or None for _, error in cells]
    df["seconds"] = [r.get("seconds") for r in recs]
    for key in ("prompt_tokens", "completion_tokens", "cost_usd"):
        df[key] = [u.get(key) for u in usage]
    atomic_write_csv(path, df)


class AgentWorker:
    """The task agent's worker in a sandbox: started on first use, replaced when it dies,
    and reusable across evaluations of one agent (the loop runs every split of a node
    through one, so the agent's imports are paid once, not once per split)."""

    def __init__(self, sandbox, agent_path: str, model: str, config: Config, gateway, node: str, role: str,
                 transcripts: Path, log_path: Path, pythonpath: list[str] = (), also_import: list[str] = ()):
        self.sandbox = sandbox
        self.agent_path = agent_path
        self.model = model
        self.config = config
        self.gateway = gateway
        self.log_path = log_path
        self.transcripts = transcripts
        self.pythonpath = list(pythonpath)
        self.also_import = list(also_import)  # MODULE:NAME entry points that must load too
        self.key = gateway.new_session(node, role)
        self.results: queue.Queue = queue.Queue()
        self.proc: WorkerProcess | None = None
        self._parked = False  # launched with --wait_for_go and not told to go yet

    def prestart(self) -> None:
        """Launch the worker now so it pays its imports, but load the agent only at `start()`:
        the loop calls this before the agent's files exist (while the meta agent writes them)."""
        self.stop()
        self._launch(wait_for_go=True)

    def start(self) -> None:
        """Load the agent in the prestarted worker, or in a fresh one; returns once the agent loaded."""
        if getattr(self.sandbox, "disk_capped", None):  # its watch kills whatever starts there now
            raise UserError(f"the agent's sandbox was stopped for {self.sandbox.disk_capped}")
        try:
            if self.proc is None or not self.proc.alive() or not self._parked:
                raise BrokenPipeError
            self.proc.go()
        except OSError:  # none parked, or it died waiting
            self.stop()
            self._launch(wait_for_go=False)
        self._parked = False
        deadline = time.monotonic() + self.config.harness.start_timeout_s
        while True:
            try:
                source, msg = self.results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise UserError(f"the agent did not load within {self.config.harness.start_timeout_s:g} s "
                                f"(see {self.log_path})") from None
            if source is not self.proc:
                continue
            if msg.get("ready"):
                return
            self.stop()
            if getattr(self.sandbox, "disk_capped", None):
                raise UserError(f"the agent's sandbox was stopped for {self.sandbox.disk_capped}")
            raise UserError(msg.get("fatal") or f"the worker exited before loading the agent (see {self.log_path})")

    def _launch(self, wait_for_go: bool) -> None:
        box = self.sandbox
        cmd = [box.python, box.trusted_script("worker.py"), "--agent_path", self.agent_path, "--model", self.model,
               "--workers", str(self.config.harness.num_workers), "--root", box.workdir,
               "--transcripts", box.inside(self.transcripts)]
        cap = self.config.harness.max_prediction_bytes
        cmd += ["--max_prediction_bytes", str(cap)]
        cmd += [arg for entry in self.also_import for arg in ("--also_import", entry)]
        cmd += ["--wait_for_go"] if wait_for_go else []
        env = worker_env(box, box.gateway_url or self.gateway.url, self.key, (self.model,))
        if self.pythonpath:
            env["PYTHONPATH"] = ":".join(self.pythonpath)
        log_cap = int(self.config.sandbox.output_cap_mb * 2**20)
        self.proc = WorkerProcess(box.popen(cmd, env), self.log_path, log_cap, self.results, cap, box)
        self._parked = wait_for_go

    def ensure_started(self) -> None:
        if self.proc is None or not self.proc.alive() or self._parked:
            self.start()

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
            self.proc = None


class Evaluation:
    """One harness run over one data set, in one output folder."""

    def __init__(self, domain, dataset, output_folder: Path, config: Config, gateway, agent: AgentWorker,
                 show_progress: bool = True, label: str | None = None):
        self.domain = domain
        self.label = label or domain.name  # the progress bar's name
        self.dataset = dataset
        self.folder = output_folder
        self.config = config
        self.gateway = gateway
        self.agent = agent
        self.show_progress = show_progress
        self.journal = Journal(output_folder / "predictions.jsonl")

    def run(self) -> dict:
        from tqdm import tqdm

        qid_col = self.domain.question_id
        done = self.journal.done_ids()
        todo = deque(
            Row(str(r[qid_col]), self.domain.format_inputs(r))
            for r in self.dataset.to_dict("records") if str(r[qid_col]) not in done
        )
        n_done_before = len(self.dataset) - len(todo)
        agent = self.agent
        inflight: dict[str, Row] = {}
        finished_since_save = 0
        stopped_by = None
        timeout = self.config.harness.row_timeout_s
        bar = None
        errors = 0

        def finish(row: Row, rec: dict) -> None:
            nonlocal finished_since_save, errors
            inflight.pop(row.qid, None)
            self.journal.append(rec)
            errors += bool(rec.get("error"))
            finished_since_save += 1
            bar.update(1)
            bar.set_postfix_str(f"cost ${self.gateway.spent().cost_usd:.4f}, errors {errors}", refresh=False)
            if finished_since_save >= self.config.harness.save_interval:
                write_predictions(self.dataset, self.domain.question_id, self.journal, self.folder / "predictions.csv",
                                  self.config.harness.max_prediction_bytes)
                finished_since_save = 0

        try:
            if todo:
                agent.ensure_started()
            # After the agent loaded, so a load error is the only thing on the screen.
            bar = tqdm(total=len(self.dataset), initial=n_done_before, unit="row", dynamic_ncols=True,
                       desc=self.label, disable=not self.show_progress)
            while todo or inflight:
                stopped_by = stopped_by or self.gateway.budget_left_message()
                if stopped_by:
                    todo.clear()
                while todo and len(inflight) < self.config.harness.num_workers + PREFETCH_ROWS:
                    row = todo.popleft()
                    row.started = None
                    inflight[row.qid] = row
                    agent.proc.send(row)
                try:
                    source, msg = agent.results.get(timeout=0.2)
                except queue.Empty:
                    source, msg = None, {}
                if source is agent.proc:
                    self._take(msg, inflight, finish)
                now = time.monotonic()
                overdue = [r for r in inflight.values() if r.started is not None and now - r.started > timeout]
                for row in overdue:
                    finish(row, {"id": row.qid, "prediction": None, "error": f"timeout after {timeout:g} s"})
                if overdue:  # a stuck thread cannot be stopped: replace the whole worker
                    self._restart(inflight, todo)
                exited = source is agent.proc and msg.get("exited")
                if exited or (inflight and not agent.proc.alive()):
                    if not exited:
                        self._drain(inflight, finish)  # a row's "started" may still be in the pipe
                    for row in list(inflight.values()):
                        if row.attempts >= MAX_ROW_ATTEMPTS:
                            finish(row, {"id": row.qid, "prediction": None, "error": agent.proc.death_reason()})
                    self._restart(inflight, todo)
        finally:
            if bar is not None:
                bar.close()
            self.journal.close()
            write_predictions(self.dataset, self.domain.question_id, self.journal, self.folder / "predictions.csv",
                              self.config.harness.max_prediction_bytes)

        recs = [self.journal.records.get(str(q)) for q in self.dataset[qid_col]]
        summary = {
            "rows": len(self.dataset),
            "done": sum(1 for r in recs if r and not r.get("error")),
            "errors": sum(1 for r in recs if r and r.get("error")),
            "not_run": sum(1 for r in recs if r is None),
            "stopped_by": stopped_by,
        }
        return summary

    @staticmethod
    def _take(msg: dict, inflight: dict, finish) -> None:
        """Apply one worker message: a row taken up (its clock and attempts start) or finished."""
        if msg.get("started") in inflight:  # ids are strs: the worker's reader checked every message
            row = inflight[msg["started"]]
            row.started = time.monotonic()
            row.attempts += 1
        elif msg.get("id") in inflight:
            finish(inflight[msg["id"]], msg)

    def _drain(self, inflight: dict, finish, wait_s: float = 2.0) -> None:
        """Apply what a dead worker wrote before it died, up to its end of output."""
        proc, deadline = self.agent.proc, time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                source, msg = self.agent.results.get(timeout=left)
            except queue.Empty:
                return
            if source is proc:
                if msg.get("exited"):
                    return
                self._take(msg, inflight, finish)

    def _restart(self, inflight: dict, todo: deque) -> None:
        """A fresh worker; rows that were in flight go back to the front of the queue."""
        for row in reversed(list(inflight.values())):
            todo.appendleft(row)
        inflight.clear()
        self.agent.stop()
        if todo:
            self.agent.start()


def harness(
    domain: str,
    agent_path: str = "task_agent",
    output_dir: str = "./outputs",
    run_id: str | None = None,
    num_samples: int = -1,
    save_interval: int | None = None,
    num_workers: int | None = None,
    resume_from: str | None = None,
    subset: str = "",
    proofs_dname: str | None = None,
    model: str | None = None,
    config: Config | None = None,
    gateway=None,
    node: str = "eval",
    workspace: str | Path | None = None,
    sandbox: str | None = None,
    agent_worker: AgentWorker | None = None,
    show_progress: bool = True,
) -> Path:
    """Evaluate `agent_path` on a domain's data; returns the output folder.

    The agent runs in a sandbox (`sandbox` overrides config.sandbox.backend) on
    `workspace`, the agent's code only; without one, the project's evolvable paths
    are copied into a temporary workspace (left empty for an installed agent such as
    `proofgrader`), so no data set or label is ever in reach.
    With `gateway=None` the harness opens its own gateway whose ledger lives in the
    output folder; the loop passes its run-wide gateway instead, and an `agent_worker`
    already running in its sandbox (then `agent_path` and `workspace` are its own).
    """
    from domains.base import use_data_files
    from domains.registry import get_domain
    from services.gateway import open_gateway
    from services.providers import check_credentials, choose_models, load_dotenv_file

    config = config or load_config()
    if sandbox is not None:
        config.sandbox.backend = sandbox
    if save_interval is not None:
        config.harness.save_interval = max(1, save_interval)
    if num_workers is not None:
        config.harness.num_workers = max(1, num_workers)
    use_data_files(config.harness.data_files)
    dom = get_domain(domain)
    dataset = load_rows(dom, subset, proofs_dname, num_samples)
    load_dotenv_file()
    why_models = choose_models(config.models)
    requested = model or dom.model_role
    model = config.resolve_model(requested)
    if why_models and show_progress and requested in ROLE_ALIASES:
        print(f"model {model}, chosen because {why_models}; override with --model", flush=True)

    if resume_from:
        folder = Path(resume_from).resolve()
        if not (folder / "predictions.jsonl").exists() and not (folder / "predictions.csv").exists():
            raise UserError(f"--resume_from {resume_from}: no predictions.jsonl there to resume from")
    else:
        run_id = run_id or datetime.now().strftime("%Y%m%d_%H%M%S_%f")
        folder = (Path(output_dir) / run_id).resolve()
        if (folder / "predictions.jsonl").exists():
            raise UserError(f"{folder} already holds a run: pass --resume_from {folder} to continue it, or another --run_id")
    created = not folder.exists()

    own_gateway = gateway is None
    if own_gateway:
        check_credentials(model)
    backend = choose_backend(config.sandbox)
    folder.mkdir(parents=True, exist_ok=True)
    scratch = None if workspace else Path(tempfile.mkdtemp(prefix="hyperagents-ws-"))
    try:
        if workspace:
            workspace = Path(workspace)
        elif is_project_agent(agent_path):
            workspace = copy_evolvable(PROJECT_ROOT, scratch)
        else:  # an installed agent brings its own code: nothing of ours may shadow or complete it
            workspace = scratch
        mounts, agent_file = agent_mounts(agent_path, workspace)
        installed_agent = bool(mounts) and agent_file is None
        (folder / "agent_evals").mkdir(exist_ok=True)
        mounts += worker_mounts(folder / "agent_evals")
        if own_gateway:
            gateway = open_gateway(config, folder, run_id=folder.name)
        gateway.allow_models(model)
        meta = {"domain": dom.name, "subset": subset, "proofs_dname": proofs_dname, "agent_path": agent_path,
                "model": model, "num_samples": num_samples, "sandbox": backend,
                "started_at": datetime.now().isoformat(timespec="seconds")}
        with contextlib.ExitStack() as stack:
            if agent_worker is None:
                box = stack.enter_context(open_sandbox(config.sandbox, workspace, mounts, gateway.unix_socket, backend))
                agent_inside = box.inside(agent_file) if agent_file else agent_path
                agent_worker = AgentWorker(box, agent_inside, model, config, gateway, node, dom.model_role,
                                           folder / "agent_evals", folder / "worker.log",
                                           [AGENT_PACKAGES] if box.isolated and installed_agent else [])
                stack.callback(agent_worker.stop)
            label = " ".join(x for x in (None if own_gateway else f"node {node}", dom.name, subset) if x)
            evaluation = Evaluation(dom, dataset, folder, config, gateway, agent_worker, show_progress, label)
            try:
                summary = evaluation.run()
            except UserError:
                if created and not evaluation.journal.records:
                    shutil.rmtree(folder, ignore_errors=True)
                raise
        spent = gateway.spent()
        meta.update(summary, finished_at=datetime.now().isoformat(timespec="seconds"),
                    cost_usd=round(spent.cost_usd, 6), prompt_tokens=spent.prompt_tokens,
                    completion_tokens=spent.completion_tokens, llm_calls=spent.calls, cache_hits=spent.cache_hits)
        atomic_write_json(folder / "run.json", meta)
    finally:
        if own_gateway and gateway is not None:
            gateway.stop()
            gateway.ledger.close()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)

    if show_progress:
        whose = "cost" if own_gateway else "run's cost so far"
        print(f"{summary['done']}/{summary['rows']} rows done, {summary['errors']} errors, "
              f"{whose} ${spent.cost_usd:.4f} ({spent.calls} calls, {spent.cache_hits} cached); "
              f"predictions: {folder / 'predictions.csv'}")
    if summary["stopped_by"]:
        raise UserError(f"{summary['stopped_by']}; {summary['not_run'] + summary['errors']} rows not evaluated: "
                        f"raise the budget and rerun with --resume_from {folder}")
    return folder


def build_parser() -> argparse.ArgumentParser:
    from services.config import int_flag, number_flag

    ap = argparse.ArgumentParser(prog="python -m domains.harness", description="Evaluate a task agent on a domain.")
    ap.add_argument("--domain", required=True,
                    help="imo_grading, imo_proof, imo_proof_grading, imo_answer, aime2025 or amo_bench")
    ap.add_argument("--data", action="append", default=None, metavar="DOMAIN=PATH",
                    help="the data file of a domain that is not bundled, e.g. amo_bench=AMO-Bench.jsonl")
    ap.add_argument("--agent_path", default="task_agent", help="a .py file or a module path with a TaskAgent")
    ap.add_argument("--output_dir", default="./outputs", help="parent folder of run folders")
    ap.add_argument("--run_id", default=None, help="run folder name (default: a timestamp)")
    ap.add_argument("--num_samples", type=int_flag(-1), default=-1, help="first N rows only; -1 = all")
    ap.add_argument("--save_interval", type=int_flag(1), default=None, help="rewrite predictions.csv every N rows")
    ap.add_argument("--num_workers", type=int_flag(1), default=None, help="rows evaluated in parallel")
    ap.add_argument("--resume_from", default=None, help="an earlier output folder to complete")
    ap.add_argument("--subset", default="", help="split (train/val/test) or the seed's suffix, e.g. _filtered_100_train")
    ap.add_argument("--proofs_dname", default=None, help="imo_proof_grading: a run folder whose proofs to grade")
    ap.add_argument("--model", default=None, help="litellm model string or a role alias from the config")
    ap.add_argument("--config", default=None, help="YAML config overriding configs/default.yaml")
    ap.add_argument("--budget_usd", type=number_flag(0), default=None,
                    help="stop new LLM calls after this many dollars")
    ap.add_argument("--budget_tokens", type=int_flag(0), default=None, help="stop new LLM calls after this many tokens")
    ap.add_argument("--sandbox", choices=SANDBOX_BACKENDS, default=None,
                    help="where agent code runs (default: the config's sandbox.backend, auto)")
    return ap


def main(argv=None) -> None:
    from services.config import validate

    args = build_parser().parse_args(argv)
    config = load_config(args.config)
    config.harness.data_files.update(parse_data_flags(args.data))
    if args.budget_usd is not None:
        config.gateway.budget_usd = args.budget_usd
    if args.budget_tokens is not None:
        config.gateway.budget_tokens = args.budget_tokens
    validate(config)
    harness(domain=args.domain, agent_path=args.agent_path, output_dir=args.output_dir, run_id=args.run_id,
            num_samples=args.num_samples, save_interval=args.save_interval, num_workers=args.num_workers,
            resume_from=args.resume_from, subset=args.subset, proofs_dname=args.proofs_dname, model=args.model,
            config=config, sandbox=args.sandbox)


if __name__ == "__main__":
    exit_on_user_error(main)
