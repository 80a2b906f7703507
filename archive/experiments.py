"""Records an experiment keeps beside its runs: a group of replicates and a run's final test.

- `group.json` in a group folder: `{"schema_version", "runs": ["seed-<s>", ...], "seeds", "argv"}`,
  one run folder per entry inside it (optimizer/replicates.py writes it);
- `final_test.json` at a run's root: the test scores of the node chosen on val and of the
  initial node, evaluated once after the last generation (optimizer/final_test.py writes it);
- `evaluations.json` at a run's root: whole splits evaluated after the run for nodes the loop
  did not evaluate on them (`run_optimization --resume_from RUN --evaluate NODES --split S`, which
  `archive.ensemble --rows all` asks for); node -> domain -> split -> score.

Both are read back as the core wrote them, or refused with a UserError naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from archive.records import EVAL_KEY
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


def _is_score(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _scored_ok(s) -> bool:
    """One evaluation: {score, rows, interval, key}, the key an address under evals/."""
    return (isinstance(s, dict) and _is_score(s.get("score")) and type(s.get("rows")) is int
            and (s.get("interval") is None or (isinstance(s["interval"], list) and len(s["interval"]) == 2
                                               and all(_is_score(v) and v is not None for v in s["interval"])))
            and (s.get("key") is None or (isinstance(s["key"], str) and EVAL_KEY.fullmatch(s["key"]) is not None)))


def _tested_ok(entry) -> bool:
    """One node's entry: domain -> evaluation."""
    return isinstance(entry, dict) and all(isinstance(d, str) and _scored_ok(s) for d, s in entry.items())


def read_final_test(path: Path) -> dict | None:
    """final_test.json as the core wrote it, or None when there is none; a UserError when it is not one."""
    record = _read(Path(path), "a final test record")
    if record is None:
        return None
    if not (isinstance(record, dict) and record.get("schema_version") == FINAL_TEST_SCHEMA
            and isinstance(record.get("nodes"), dict) and isinstance(record.get("chosen_on", ""), str)
            and isinstance(record.get("best", ""), str)
            and all(isinstance(k, str) and _tested_ok(v) for k, v in record["nodes"].items())):
        raise UserError(f"{path}: not a final test record the run wrote (schema_version {FINAL_TEST_SCHEMA} "
                        "and nodes expected)")
    return record


def read_evaluations(path: Path) -> dict | None:
    """evaluations.json as the core wrote it, or None when there is none; a UserError when it is not one."""
    record = _read(Path(path), "a record of evaluations")
    if record is None:
        return None
    if not (isinstance(record, dict) and record.get("schema_version") == EVALUATIONS_SCHEMA
            and isinstance(record.get("nodes"), dict)
            and all(isinstance(node, str) and isinstance(domains, dict)
                    and all(isinstance(d, str) and isinstance(splits, dict)
                            and all(isinstance(s, str) and _scored_ok(v) for s, v in splits.items())
                            for d, splits in domains.items())
                    for node, domains in record["nodes"].items())):
        raise UserError(f"{path}: not a record of evaluations the run wrote (schema_version {EVALUATIONS_SCHEMA} "
                        "and nodes expected)")
    return record
