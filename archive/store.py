"""The archive of a run: every node ever made, on disk, and the event log.

`nodes/<id>/node.json` is the record of a finished node, written atomically once its
generation is over: it is the source of truth. `archive.jsonl` is an append-only log
of what happened when (generation started, meta agent done, node recorded); a kill
can cut its last line, which readers skip. A generation with a `gen_start` event but
no node record was interrupted and is redone on resume.
"""

from __future__ import annotations

import json
import os
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path

from archive.selection import Candidate
from services.config import conforms, describe, show
from services.errors import UserError
from services.fsutil import atomic_write_json, read_bounded

STATUSES = ("ok", "no_change", "meta_failed", "load_failed", "eval_failed", "budget_stopped")


@dataclass
class Node:
    node_id: str
    parent: str | None
    generation: int
    commit: str | None = None
    status: str = "ok"
    scores: dict[str, dict[str, float | None]] = field(default_factory=dict)  # domain -> split -> score (score key)
    samples: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> split -> rows scored
    full_eval: dict[str, bool] = field(default_factory=dict)  # domain -> whether the full evaluation ran
    eval_keys: dict[str, dict[str, str]] = field(default_factory=dict)  # domain -> split -> address under evals/
    cost_usd: dict[str, float] = field(default_factory=dict)  # role -> dollars spent for this node
    tokens: dict[str, int] = field(default_factory=dict)  # role -> tokens
    seconds: dict[str, float] = field(default_factory=dict)  # phase (meta, check, eval, total) -> wall seconds
    patch: dict = field(default_factory=dict)  # files, insertions, deletions, dropped (protected paths)
    error: str | None = None
    created_at: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))

    @classmethod
    def from_dict(cls, data, folder: str) -> Node:
        """The record of `nodes/<folder>/node.json`, trusted only in the shape the core writes (known keys,
        typed fields, the folder's own id, a known status); else ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        unknown = sorted(set(data) - set(hints))
        if unknown:
            raise ValueError(f"unknown keys {', '.join(map(str, unknown))}")
        missing = [f.name for f in fields(cls)
                   if f.name not in data and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise ValueError(f"missing keys {', '.join(missing)}")
        for key, value in data.items():
            if not conforms(value, hints[key]):
                raise ValueError(f"{key} must be {describe(hints[key])}, got {show(value)}")
        if data["node_id"] != folder:
            raise ValueError(f"node_id {data['node_id']!r} is not its folder's name {folder!r}")
        if data["generation"] < 0:
            raise ValueError(f"generation must be 0 or more, got {data['generation']}")
        if data.get("status", "ok") not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {show(data['status'])}")
        return cls(**data)

    @property
    def valid_parent(self) -> bool:
        """Only a node that loaded and was scored can be built on (a no-op child is its parent again)."""
        return self.status == "ok"


def selection_score(node: Node, domain, full_sizes: dict[str, int]) -> float | None:
    """The score the loop selects on for one domain: val where the domain has one, else train.

    A node that only passed the staged evaluation has its staged (train) score scaled by
    the staged fraction, e.g. 10/100, as in the reference: a lucky 10-row score must
    not outrank a node measured on the full set.
    """
    scores = node.scores.get(domain.name, {})
    split = "val" if "val" in domain.splits else "train"
    if node.full_eval.get(domain.name) and split in scores:
        return scores[split]
    if "train" in scores:
        staged = node.samples.get(domain.name, {}).get("train", 0)
        return scores["train"] * staged / max(full_sizes[domain.name], 1)
    return None


def mean_score(node: Node, domains: list, full_sizes: dict[str, int]) -> float:
    """The node's selection score averaged over domains, a domain without one counting 0."""
    return sum(selection_score(node, d, full_sizes) or 0 for d in domains) / len(domains)


class Archive:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.nodes_dir = self.run_dir / "nodes"
        self.log_path = self.run_dir / "archive.jsonl"
        self.nodes: dict[str, Node] = {}
        for path in sorted(self.nodes_dir.glob("*/node.json")):
            node = self._read_node(path)
            self.nodes[node.node_id] = node

    @staticmethod
    def _read_node(path: Path) -> Node:
        """One node record; a garbled or wrongly shaped one is a UserError naming the file, not a traceback."""
        try:
            return Node.from_dict(json.loads(read_bounded(path).decode("utf-8")), path.parent.name)
        except (OSError, ValueError) as e:  # ValueError: also bad JSON and bad UTF-8
            raise UserError(f"{path}: not a node record the run wrote ({e})") from None

    # -- events ---------------------------------------------------------------------------
    def log(self, event: str, **fields) -> None:
        record = {"event": event, "time": datetime.now().isoformat(timespec="seconds"), **fields}
        with open(self.log_path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")  # end the line a kill cut short, so this record stays whole
            f.write(json.dumps(record, default=str).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def events(self) -> list[dict]:
        if not self.log_path.exists():
            return []
        found = []
        for line in self.log_path.read_text(encoding="utf-8").splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # the line a kill cut short
        return found

    def pending_generation(self) -> dict | None:
        """The last `gen_start` whose node was never recorded: the generation to redo."""
        starts = [e for e in self.events() if e["event"] == "gen_start"]
        if starts and starts[-1]["node_id"] not in self.nodes:
            return starts[-1]
        return None

    def meta_result(self, node_id: str) -> dict | None:
        """The `meta_done` event of an unfinished node: its change is committed, evaluation may resume."""
        done = [e for e in self.events() if e["event"] == "meta_done" and e["node_id"] == node_id]
        return done[-1] if done else None

    # -- nodes ----------------------------------------------------------------------------
    def record(self, node: Node) -> None:
        atomic_write_json(self.nodes_dir / node.node_id / "node.json", asdict(node))
        self.nodes[node.node_id] = node
        self.log("node_recorded", node_id=node.node_id, status=node.status, scores=node.scores)

    def reopen_budget_stopped(self) -> None:
        """Make nodes the budget stopped pending again, so a resumed run (with more budget)
        finishes them from where they stopped instead of keeping them half-evaluated."""
        for node in [n for n in self.nodes.values() if n.status == "budget_stopped"]:
            path = self.nodes_dir / node.node_id / "node.json"
            path.replace(path.with_name("node.budget_stopped.json"))
            del self.nodes[node.node_id]
            self.log("node_reopened", node_id=node.node_id)

    def node_dir(self, node_id: str) -> Path:
        path = self.nodes_dir / node_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def children(self, node_id: str) -> int:
        return sum(1 for n in self.nodes.values() if n.parent == node_id)

    def ordered(self) -> list[Node]:
        return sorted(self.nodes.values(), key=lambda n: (n.generation, n.created_at))

    def candidates(self, domains: list, full_sizes: dict[str, int]) -> list[Candidate]:
        """Valid parents with a selection score on every domain."""
        found = []
        for order, node in enumerate(self.ordered()):
            if not node.valid_parent:
                continue
            if any(selection_score(node, d, full_sizes) is None for d in domains):
                continue
            found.append(Candidate(node.node_id, mean_score(node, domains, full_sizes), self.children(node.node_id),
                                   order))
        return found

    def next_generation(self) -> int:
        return 1 + max((n.generation for n in self.nodes.values()), default=0)
