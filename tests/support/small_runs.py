"""Run folders made of node records whose scores a test chooses, written with the project's own records,
for checks against a hand count (apps.analyze, the run state)."""

from __future__ import annotations

from pathlib import Path

from archive.records import Node, RunRecord, Status
from services.fsutil import atomic_write_json

D = "imo_grading"


def write_node(run: Path, node_id: str, generation: int, score: float | None, parent: str | None = "initial",
               staged: bool = False, key: str | None = None, status: Status = Status.OK) -> None:
    node = Node(node_id, None if node_id == "initial" else parent, generation, status=status)
    if score is not None and staged:
        node.scores, node.samples, node.full_eval = {D: {"train": score}}, {D: {"train": 10}}, {D: False}
    elif score is not None:
        node.scores, node.samples, node.full_eval = ({D: {"train": score, "val": score}},
                                                     {D: {"train": 100, "val": 100}}, {D: True})
        if key:
            node.eval_keys = {D: {"val": key}}
    atomic_write_json(run / "nodes" / node_id / "node.json", node.to_dict())


def write_run(run: Path, seed: int, scores: list, **special) -> Path:
    """A run whose generation g made one node scoring scores[g] (None: it failed to load);
    special: node id -> keyword arguments of write_node."""
    (run / "nodes").mkdir(parents=True)
    atomic_write_json(run / "run.json", RunRecord([D], {"loop": {"seed": seed}}, "bwrap").to_dict())
    for g, score in enumerate(scores):
        node_id = "initial" if g == 0 else str(g)
        options = {"status": Status.LOAD_FAILED} if score is None and g else {}
        write_node(run, node_id, g, score, **{**options, **special.get(node_id, {})})
    return run
