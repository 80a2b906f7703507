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
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from archive.records import Node
from services.fsutil import (
    atomic_write_bytes,
    atomic_write_csv,
    atomic_write_json,
    atomic_write_text,
    make_folder,
    read_csv_text,
)
from services.gateway import redact_keys

if TYPE_CHECKING:
    from archive.eval_store import EvalStore
    from domains.base import Domain


def write_train_data(run_dir: Path, domains: list[Domain]) -> None:
    """Train rows with inputs and label, one JSON line each, for the try command; written whole
    each time a run starts or resumes, so a file a kill cut short is never what the sandbox reads."""
    folder = run_dir / "train_data"
    make_folder(folder)
    for d in domains:
        atomic_write_text(folder / f"{d.name}_train.jsonl", "\n".join(d.try_lines(d.load("train"))) + "\n")


def publish_feedback(run_dir: Path, domains: list[Domain], store: EvalStore, node: Node) -> None:
    """The node's patch, a summary of it (train scores only) and its train results, where later
    meta agents can read them. `store`: the run's archive.eval_store.EvalStore.

    For graded domains each row gets the grader's verdict as `grade`. Predictions are read as given
    (read_csv_text), not as marked for spreadsheets."""
    folder = run_dir / "feedback" / node.node_id
    make_folder(folder)
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
