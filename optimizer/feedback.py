"""What a meta agent may read of the run: train rows with labels, and earlier nodes' train results.

Written by the core into folders that sandboxes mount read-only: `train_data/` (the try
command's rows) and `feedback/<node>/` (each node's patch and what it was, and per domain
its train report and predictions). Val and test results never go there, nor the columns a
domain hides from agents (except the label of a train row, which the meta agent has anyway).
As in the HyperAgents reference, where the meta agent reads the earlier generations' folders
(their patches and train evaluations), a meta agent can see what was tried and how it did.

Everything published is agent text a later sandbox reads, so every gateway session key in it
is redacted (a task agent that returns its own key as its prediction hands it to no one; its key
was revoked when its sandbox closed anyway: services/gateway/sessions.py).

`loop.feedback: paper` adds what the reference's meta agent also finds in the earlier generations'
folders (generate_loop.py copies its whole output folder, pruning the current generation and every
val and test evaluation folder): per node `meta_chat_history.md` (its meta agent's transcript),
`generation.log` (the generation as the loop saw it: parent, change, scores, screening, status, and
what the meta agent's run printed; the node's val scores too, which the reference's generation log
holds as its evaluations printed them), and per domain `agent_evals/chat_history_<row id>.md`, the
task agent's transcript of each train row. Never a val or test row: the transcripts are found through
the train evaluation's journal, row by row. Transcripts are agent text of any size and bytes: read
without following a link or opening a fifo, each cut to its first and last halves of a cap, a node's
row transcripts within a cap of their own (the rows past it listed in `agent_evals/LEFT_OUT.txt`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from archive.records import NODE_ID, Node
from archive.store import META_TRANSCRIPT, UNTRUSTED
from domains.harness.journal import JOURNAL, read_journal
from optimizer.meta_outcome import META_LOG
from services.choices import Feedback
from services.errors import UserError
from services.fsutil import (
    atomic_write_bytes,
    atomic_write_csv,
    atomic_write_json,
    atomic_write_text,
    make_folder,
    read_below,
    read_bounded,
    read_csv_text,
)
from services.gateway import redact_keys
from services.gateway.sessions import REDACTED

if TYPE_CHECKING:
    from archive.eval_store import EvalStore
    from domains.base import Domain
    from services.config import Config

FEEDBACK_MODES = tuple(Feedback)  # loop.feedback
TRY_ROWS = 5  # train rows the meta agent's try command runs the task agent on
MAX_TRANSCRIPT = 256 * 2**10  # bytes kept of one row's transcript (its first and last halves when longer)
MAX_ROW_TRANSCRIPTS = 16 * 2**20  # bytes of a node's row transcripts of one domain together
MAX_META_TRANSCRIPT = 2 * 2**20  # bytes kept of a node's meta agent transcript
MAX_META_OUTPUT = 256 * 2**10  # bytes kept of what the meta agent's run printed, in generation.log
_TOKEN = re.compile(r"[0-9a-f]{12}")  # a row's token in a journal (domains/harness/scheduler.row_token)
_CUT_KEY = re.compile(r"gw-[A-Za-z0-9_-]{0,31}\Z")  # the start of a gateway key that a cut left at the end
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def write_train_data(run_dir: Path, domains: list[Domain]) -> None:
    """Train rows with inputs and label, one JSON line each, for the try command; written whole
    each time a run starts or resumes, so a file a kill cut short is never what the sandbox reads."""
    folder = run_dir / "train_data"
    make_folder(folder)
    for d in domains:
        atomic_write_text(folder / f"{d.name}_train.jsonl", "\n".join(d.try_lines(d.load("train"))) + "\n")


def feedback_mode(config: Config | None) -> str:
    """loop.feedback of `config`; `train_reports`, the default, without a config or the field."""
    mode = getattr(getattr(config, "loop", None), "feedback", FEEDBACK_MODES[0])
    if mode not in FEEDBACK_MODES:
        raise UserError(f"loop.feedback is {mode!r}, not one of {', '.join(FEEDBACK_MODES)}")
    return mode


def publish_feedback(run_dir: Path, domains: list[Domain], store: EvalStore, node: Node,
                     config: Config | None = None) -> None:
    """The node's patch, a summary of it (train scores only) and its train results, where later
    meta agents can read them; with `config`'s loop.feedback `paper`, also its transcripts and
    generation log (see the module's docstring). `store`: the run's archive.eval_store.EvalStore.

    For graded domains each row gets the grader's verdict as `grade`. Predictions are read as given
    (read_csv_text), not as marked for spreadsheets."""
    paper = feedback_mode(config) == Feedback.PAPER
    folder = run_dir / "feedback" / node.node_id
    make_folder(folder)
    if paper:
        publish_generation(run_dir, node, folder, domains, store)
    patch = run_dir / "nodes" / node.node_id / "patch.diff"
    if patch.is_file() and not patch.is_symlink():  # written by the core; the initial node has none
        _publish(patch, folder / "patch.diff")
    atomic_write_json(folder / "metadata.json", {
        "node": node.node_id, "parent": node.parent, "generation": node.generation, "status": node.status,
        "full_eval": node.full_eval, "meta_failed": node.meta_failed,
        "train": {d: {"score": found.score, "rows": found.rows}
                  for d, split, found in node.evaluations() if split == "train"}})
    for domain in domains:
        key = node.eval_key(domain.name, "train")
        if key is None:
            continue
        dst = folder / domain.name
        make_folder(dst)
        if paper:
            publish_row_transcripts(run_dir, store.folder(key) / JOURNAL, node.node_id, dst / "agent_evals")
        if store.report_path(key).exists():
            _publish(store.report_path(key), dst / "report.json")
        if not store.predictions(key).exists():
            continue
        grades = read_csv_text(store.gradings(key)) if store.gradings(key).exists() else None
        rows = domain.feedback(read_csv_text(store.predictions(key)), grades)
        atomic_write_csv(dst / "predictions.csv", rows.map(lambda v: redact_keys(v) if isinstance(v, str) else v))


def _publish(source: Path, target: Path) -> None:
    """A file the core wrote, with the gateway keys in its text redacted."""
    text = source.read_bytes().decode("utf-8", "surrogateescape")
    atomic_write_bytes(target, redact_keys(text).encode("utf-8", "surrogateescape"))


# -- loop.feedback paper: transcripts and the generation's log -------------------------------------
def publish_generation(run_dir: Path, node: Node, folder: Path, domains: list[Domain], store: EvalStore) -> None:
    """The node's meta agent transcript and its generation's log, into its feedback `folder`."""
    transcript = agent_text(run_dir, f"{UNTRUSTED}/{node.node_id}/meta/{META_TRANSCRIPT}", MAX_META_TRANSCRIPT)
    if transcript is not None:
        atomic_write_text(folder / "meta_chat_history.md", transcript, sync=False)
    log = generation_log(run_dir, node) + report_lines(node, domains, store)
    atomic_write_text(folder / "generation.log", redact_keys(log), sync=False)


def report_lines(node: Node, domains: list[Domain], store: EvalStore) -> str:
    """Each split's report as the domain prints it (per label, MAE, distributions: figures, never rows), as
    the reference's generate.log holds the report runs' output, val's included."""
    parts = []
    for domain in domains:
        for split in ("train", "val"):
            key = node.eval_key(domain.name, split)
            if key is None or not store.report_path(key).is_file():
                continue
            try:
                report = json.loads(read_bounded(store.report_path(key), 2**20))
                text = domain.format_report(report)
            except (OSError, ValueError, KeyError, TypeError):  # the core's own file; an old shape is left out
                continue
            parts += ["", f"--- {domain.name} {split} report ---", text.rstrip("\n")]
    return "\n".join(parts) + "\n" if parts else ""


def generation_log(run_dir: Path, node: Node) -> str:
    """The generation as the loop saw it, from the node's record (train and val scores, never a row),
    then what its meta agent's run printed. Tamper flags are left out: they say what the host screens."""
    lines = [f"node {node.node_id}, generation {node.generation}, "
             f"parent {node.parent if node.parent is not None else 'none: the initial node'}"]
    if node.meta_model:
        lines.append(f"meta agent: model {node.meta_model}, {node.seconds.get('meta', 0):.0f} s")
    if node.patch:
        patch = node.patch
        lines.append(f"change: {patch.get('files', 0)} files (+{patch.get('insertions', 0)} "
                     f"-{patch.get('deletions', 0)}), {len(patch.get('dropped') or [])} files dropped")
    lines += [f"{domain} {split}: {found.text()}" for domain, split, found in node.evaluations()
              if split in ("train", "val")]
    lines += [f"{domain} screening: {verdict}" for domain, verdicts in node.screening.items() for verdict in verdicts]
    lines.append(f"status: {node.status}" + (f": {node.error}" if node.error else ""))
    if node.meta_error:
        lines.append(f"the meta agent failed, its change evaluated anyway: {node.meta_error}")
    if node.cost_usd:
        lines.append("cost: " + ", ".join(f"{role} ${usd:.4f}" for role, usd in sorted(node.cost_usd.items())))
    printed = agent_text(run_dir, f"nodes/{node.node_id}/{META_LOG}", MAX_META_OUTPUT)
    if printed is not None:
        lines += ["", "--- what the meta agent's run printed ---", printed]
    return "\n".join(lines) + "\n"


def publish_row_transcripts(run_dir: Path, journal: Path, node_id: str, target: Path) -> None:
    """The task agent's transcript of each row of a train evaluation, named by the row's id, into `target`.

    The evaluation's journal maps each row to the token its worker knew it by, which names the
    transcript in the `agent_evals` folder of the node that ran it: this node's, or an earlier
    node's with the same task agent whose evaluation this one reuses."""
    if not journal.is_file() or journal.is_symlink():
        return
    tokens = {str(rec["id"]): rec.get("token") for rec in read_journal(journal)}  # a row's last record wins
    owners = _owners(run_dir, node_id)
    room, left_out = MAX_ROW_TRANSCRIPTS, []
    for row_id, token in tokens.items():
        text = _row_transcript(run_dir, owners, token) if isinstance(token, str) and _TOKEN.fullmatch(token) else None
        if text is None:
            continue
        size = len(text.encode("utf-8", "backslashreplace"))
        if size > room:
            left_out.append(row_id)
            continue
        room -= size
        make_folder(target)
        atomic_write_text(target / f"chat_history_{_UNSAFE.sub('_', row_id)}.md", text, sync=False)
    if left_out:
        atomic_write_text(target / "LEFT_OUT.txt", f"Transcripts of these rows are left out: the feedback keeps "
                          f"{MAX_ROW_TRANSCRIPTS // 2**20} MiB of a node's transcripts.\n" + "\n".join(left_out) + "\n",
                          sync=False)


def _owners(run_dir: Path, node_id: str) -> list[str]:
    """The nodes whose sandboxes may have written a transcript of `node_id`'s evaluations: itself first."""
    try:
        with os.scandir(run_dir / UNTRUSTED) as entries:
            others = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and NODE_ID.fullmatch(e.name))
    except OSError:
        others = []
    return [node_id] + [n for n in others if n != node_id]


def _row_transcript(run_dir: Path, owners: list[str], token: str) -> str | None:
    """The transcript named by `token` in the first of `owners` that has it; that owner moves to the front,
    since a node's next rows were most likely answered by the same worker."""
    for i, owner in enumerate(owners):
        text = agent_text(run_dir, f"{UNTRUSTED}/{owner}/agent_evals/chat_history_{token}.md", MAX_TRANSCRIPT)
        if text is not None:
            owners.insert(0, owners.pop(i))
            return text
    return None


def agent_text(root: Path, relative: str, cap: int) -> str | None:
    """The agent-written file `relative` below `root` as text, its gateway keys redacted, or None when there
    is no regular file there (through no link, never a fifo). Over `cap` bytes, its first and last halves."""
    try:
        head, cut = read_below(root, relative, cap)
        tail = read_below(root, relative, cap // 2, tail=True)[0] if cut else b""
    except OSError:
        return None
    if not cut:
        return redact_keys(head.decode("utf-8", "replace"))
    first = _CUT_KEY.sub(REDACTED, redact_keys(head[:cap // 2].decode("utf-8", "replace")))
    return (f"{first}\n\n[... the middle is left out: the feedback keeps the first and last {cap // 2**11} KiB "
            f"of this file ...]\n\n{redact_keys(tail.decode('utf-8', 'replace'))}")
