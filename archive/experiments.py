"""Records an experiment keeps beside its runs: a group of replicates and a run's final test.

- `group.json` in a group folder: `{"schema_version", "runs": ["seed-<s>", ...], "seeds", "argv"}`,
  one run folder per entry inside it (optimizer/replicates.py writes it);
- `final_test.json` at a run's root: the test scores of the node chosen on val and of the
  initial node, evaluated once after the last generation (optimizer/final_test.py writes it);
- `evaluations.json` at a run's root: whole splits evaluated after the run for nodes the loop
  did not evaluate on them (`run_optimization --resume_from RUN --evaluate NODES --split S`, which
  `apps.ensemble --rows all` asks for); node -> domain -> split -> score.

Both are read back as the core wrote them, or refused with a UserError naming the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from archive.records import DomainEval
from services.errors import UserError
from services.fsutil import read_bounded
from services.user_files import parse_json

GROUP = "group.json"
GROUP_SCHEMA = 1
RUN_NAME = re.compile(r"seed-[0-9]+")  # a replicate's folder in its group
FINAL_TEST = "final_test.json"
FINAL_TEST_SCHEMA = 1
EVALUATIONS = "evaluations.json"
EVALUATIONS_SCHEMA = 1
MAX_RECORD = 2**20


def _read(path: Path, what: str) -> dict | None:
    try:
        found = parse_json(read_bounded(path, MAX_RECORD))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not {what} the run wrote ({e})") from None
    if not isinstance(found, dict):
        raise UserError(f"{path}: not {what} the run wrote (not a JSON object)")
    return found


def read_group(group_dir: Path) -> dict | None:
    """group.json as the core wrote it, None when the folder has none; a UserError when it is not one."""
    path = Path(group_dir) / GROUP
    group = _read(path, "a group of replicates")
    if group is None:
        return None
    ok = (isinstance(group, dict) and group.get("schema_version") == GROUP_SCHEMA
          and isinstance(group.get("runs"), list) and all(isinstance(r, str) and RUN_NAME.fullmatch(r)
                                                           for r in group["runs"])
          and isinstance(group.get("seeds"), list) and all(type(s) is int for s in group["seeds"])
          and len(group["seeds"]) == len(group["runs"])
          and isinstance(group.get("argv"), list) and all(isinstance(a, str) for a in group["argv"]))
    if not ok:
        raise UserError(f"{path}: not a group of replicates the run wrote")
    return group


@dataclass
class FinalTest:
    """final_test.json: the test split's evaluation of the node chosen on `chosen_on` (`best`) and of
    the initial node, node -> domain -> evaluation."""

    chosen_on: str = ""  # the splits the best node was chosen on, e.g. "val"
    best: str = ""  # the chosen node's id
    nodes: dict[str, dict[str, DomainEval]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"schema_version": FINAL_TEST_SCHEMA, "chosen_on": self.chosen_on, "best": self.best,
                "nodes": {n: {d: e.to_dict() for d, e in found.items()} for n, found in self.nodes.items()}}


@dataclass
class Evaluations:
    """evaluations.json: whole splits evaluated after the run, node -> domain -> split -> evaluation."""

    nodes: dict[str, dict[str, dict[str, DomainEval]]] = field(default_factory=dict)

    def get(self, node_id: str, domain: str, split: str) -> DomainEval | None:
        return self.nodes.get(node_id, {}).get(domain, {}).get(split)

    def to_dict(self) -> dict:
        return {"schema_version": EVALUATIONS_SCHEMA,
                "nodes": {n: {d: {s: e.to_dict() for s, e in splits.items()} for d, splits in domains.items()}
                          for n, domains in self.nodes.items()}}


def _nested(value: object, depth: int) -> dict:
    """`value` as `depth` levels of string-keyed objects with an evaluation at the bottom; else ValueError."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError("expected an object with string keys")
    if depth == 1:
        return {k: DomainEval.from_dict(v) for k, v in value.items()}
    return {k: _nested(v, depth - 1) for k, v in value.items()}


def read_final_test(path: Path) -> FinalTest | None:
    """final_test.json as the core wrote it, or None when there is none; a UserError when it is not one."""
    record = _read(Path(path), "a final test record")
    if record is None:
        return None
    try:
        if record.get("schema_version") != FINAL_TEST_SCHEMA or set(record) - {"schema_version", "chosen_on",
                                                                                   "best", "nodes"}:
            raise ValueError(f"schema_version {FINAL_TEST_SCHEMA} and nodes expected")
        chosen_on, best = record.get("chosen_on", ""), record.get("best", "")
        if not isinstance(chosen_on, str) or not isinstance(best, str):
            raise ValueError("chosen_on and best must be text")
        return FinalTest(chosen_on, best, _nested(record.get("nodes"), 2))
    except ValueError as e:
        raise UserError(f"{path}: not a final test record the run wrote ({e})") from None


def read_evaluations(path: Path) -> Evaluations | None:
    """evaluations.json as the core wrote it, or None when there is none; a UserError when it is not one."""
    record = _read(Path(path), "a record of evaluations")
    if record is None:
        return None
    try:
        if record.get("schema_version") != EVALUATIONS_SCHEMA or set(record) - {"schema_version", "nodes"}:
            raise ValueError(f"schema_version {EVALUATIONS_SCHEMA} and nodes expected")
        return Evaluations(_nested(record.get("nodes"), 3))
    except ValueError as e:
        raise UserError(f"{path}: not a record of evaluations the run wrote ({e})") from None
