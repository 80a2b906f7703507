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
import shutil
from pathlib import Path

from domains.harness import GRADINGS, JOURNAL, PREDICTIONS
from services.fsutil import atomic_write_json

REPORT = "report.json"


class EvalStore:
    def __init__(self, run_dir: Path):
        self.root = run_dir / "evals"

    @staticmethod
    def key(agent_hash: str, domain: str, split: str, rows: int, model: str) -> str:
        text = json.dumps([agent_hash, domain, split, rows, model])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def folder(self, key: str) -> Path:
        return self.root / key

    def report_path(self, key: str) -> Path:
        return self.folder(key) / REPORT

    def report(self, key: str) -> dict | None:
        """The scores of a finished evaluation, or None while it has none."""
        path = self.report_path(key)
        return json.loads(path.read_text()) if path.is_file() else None

    def save_report(self, key: str, report: dict) -> None:
        atomic_write_json(self.report_path(key), report)

    def seed(self, key: str, smaller: str) -> bool:
        """Start evaluation `key` from the journal of `smaller`, an evaluation of the same agent on its
        first rows; only a folder not yet made is seeded. Whether `key` holds a folder now."""
        folder, journal = self.folder(key), self.folder(smaller) / JOURNAL
        if not folder.exists() and journal.exists():
            folder.mkdir(parents=True)
            shutil.copy2(journal, folder / JOURNAL)
        return folder.exists()

    def predictions(self, key: str) -> Path:
        return self.folder(key) / PREDICTIONS

    def gradings(self, key: str) -> Path:
        """The grader's predictions.csv for the rows of evaluation `key` (graded domains only)."""
        return self.folder(key) / GRADINGS / PREDICTIONS
