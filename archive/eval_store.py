"""A run's evaluations on disk: `evals/<key>/`, one folder per (task-agent code, model, domain, split, rows).

The key is a hash of those five, so a task agent whose code and model did not change is
never evaluated twice, and an evaluation a kill interrupted resumes from its journal. A
folder holds the harness run (predictions.jsonl, predictions.csv, run.json), for graded
domains the grading run in `gradings/`, and `report.json` once it was scored: only the
core writes here, and a folder without a report is an evaluation to finish, never a score.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from archive.records import EVAL_KEY
from archive.row_costs import COST_FILE, MAX_COST_BYTES, Tally
from domains.harness import GRADINGS, JOURNAL, PREDICTIONS
from domains.harness.journal import MAX_JOURNAL
from domains.scoring import REPORT_SCHEMA
from services.errors import UserError
from services.fsutil import atomic_write_json, make_folder, open_append, open_regular, read_bounded
from services.user_files import parse_json

REPORT = "report.json"
MAX_REPORT_BYTES = 2**24  # a report is a few KB of metrics; a bigger file is no report the core wrote


class EvalStore:
    def __init__(self, run_dir: Path) -> None:
        self.root = run_dir / "evals"

    @staticmethod
    def key(agent_hash: str, domain: str, split: str, rows: int, model: str) -> str:
        text = json.dumps([agent_hash, domain, split, rows, model])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def folder(self, key: str) -> Path:
        if not isinstance(key, str) or not EVAL_KEY.fullmatch(key):  # a key read from a record is never a path
            raise UserError(f"not an evaluation's key (24 hex digits): {str(key)[:40]!r}")
        return self.root / key

    def report_path(self, key: str) -> Path:
        return self.folder(key) / REPORT

    def report(self, key: str) -> dict | None:
        """The scores of a finished evaluation, or None while it has none; a UserError naming the file when
        it is not a report the core wrote (garbled, a link, too big, not an object, a newer schema)."""
        path = self.report_path(key)
        try:
            report = parse_json(read_bounded(path, MAX_REPORT_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:  # ValueError: also bad JSON and bad UTF-8
            raise UserError(f"{path}: not a report the run wrote ({e})") from None
        version = report.get("schema_version", 0) if isinstance(report, dict) else None
        if not isinstance(report, dict) or type(version) is not int or not 0 <= version <= REPORT_SCHEMA:
            raise UserError(f"{path}: not a report the run wrote (a JSON object with schema_version 0 to "
                            f"{REPORT_SCHEMA} expected, got {str(report)[:100]})")
        return report

    def save_report(self, key: str, report: dict) -> None:
        atomic_write_json(self.report_path(key), report)

    def tally(self, key: str) -> Tally | None:
        """What the task agent's calls on the evaluation's rows cost (archive/row_costs.py), or None when
        no pass of it was tallied; a UserError naming the file when it is not a tally the core wrote."""
        path = self.folder(key) / COST_FILE
        try:
            return Tally.from_dict(parse_json(read_bounded(path, MAX_COST_BYTES)))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:  # ValueError: also bad JSON and bad UTF-8
            raise UserError(f"{path}: not a cost record the run wrote ({e})") from None

    def save_tally(self, key: str, tally: Tally) -> None:
        atomic_write_json(self.folder(key) / COST_FILE, tally.to_dict())

    def seed(self, key: str, smaller: str) -> bool:
        """Start evaluation `key` from the journal of `smaller`, an evaluation of the same agent on its
        first rows, when `key` has no journal yet. Whether `key` has a journal now.

        The copy goes to a temporary file first and takes the journal's name whole, so a kill at any
        point leaves either no journal (seeded again next time) or the complete one."""
        target, journal = self.folder(key) / JOURNAL, self.folder(smaller) / JOURNAL
        if not os.path.lexists(target) and os.path.lexists(journal):
            make_folder(target.parent)
            partial = target.with_name(f".{JOURNAL}.seeding")
            partial.unlink(missing_ok=True)  # a kill's leftover, or a link planted there: removed, never followed
            try:  # a handed run's journal: a link is never followed, a fifo never waited on
                src = open_regular(journal, MAX_JOURNAL)
            except OSError as e:
                raise UserError(f"{journal} cannot be read as a journal: {e.strerror or e}") from None
            with src, open_append(partial) as dst:
                copied = 0
                while chunk := src.read(2**20):
                    copied += len(chunk)
                    if copied > MAX_JOURNAL:  # it grew after the check
                        raise UserError(f"{journal} is over the limit of {MAX_JOURNAL} bytes for a journal")
                    dst.write(chunk)
                dst.sync()
            os.replace(partial, target)
        return target.exists()

    def predictions(self, key: str) -> Path:
        return self.folder(key) / PREDICTIONS

    def gradings(self, key: str) -> Path:
        """The grader's predictions.csv for the rows of evaluation `key` (graded domains only)."""
        return self.folder(key) / GRADINGS / PREDICTIONS
