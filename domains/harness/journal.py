"""What a harness run leaves in its folder: the journal of finished rows and predictions.csv.

Every finished row is appended to `predictions.jsonl` at once (and synced), so a killed
run loses only the rows in flight and a resumed one pays nothing for the rows it holds.
`predictions.csv`, the seed's output format, is rewritten whole and atomically from the
journal, its cells safe to open in a spreadsheet (a prediction that would run as a formula
gets a leading `'`: `services.render.csv_cell`); the project's readers undo that
(`services.fsutil.csv_values`), and the journal keeps the text exactly.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from inside.worker import utf8_text
from services.fsutil import atomic_write_csv, open_append

if TYPE_CHECKING:
    import pandas as pd

JOURNAL = "predictions.jsonl"
PREDICTIONS = "predictions.csv"
RESULT_COLUMNS = ["prediction", "error", "seconds", "prompt_tokens", "completion_tokens", "cost_usd"]


class Journal:
    """Append-only record of finished rows; the last record of an id wins. `sync=False` leaves each
    line unsynced (see services.fsutil.atomic_write_bytes): same lines, for journals made at will."""

    def __init__(self, path: Path, sync: bool = True) -> None:
        self.path = path
        self.sync = sync
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
            self._file = io.TextIOWrapper(open_append(self.path), encoding="utf-8")  # no link followed
        self._file.write(json.dumps(rec, default=str) + "\n")
        self._file.flush()
        if self.sync:
            os.fsync(self._file.fileno())
        self.records[str(rec["id"])] = rec

    def close(self) -> None:
        if self._file:
            self._file.close()


def _prediction_cells(rec: dict, cap: int) -> tuple[str | None, str | None]:
    """A record's (prediction, error) as predictions.csv shows them: encodable text within the cap."""
    prediction, error = rec.get("prediction"), rec.get("error")
    if prediction is None:
        return None, error
    text, size = utf8_text(str(prediction))
    if size > cap:  # a journal resumed under a smaller cap than it was written with
        return None, error or f"prediction of {size} bytes is over the cap of {cap}"
    return text, error


def write_predictions(dataset: pd.DataFrame, qid_col: str, journal: Journal, path: Path, max_prediction_bytes: int,
                      sync: bool = True) -> None:
    """The seed's predictions.csv: the data set's columns plus what each row produced (`sync`: see
    services.fsutil.atomic_write_bytes)."""
    df = dataset.copy()
    recs = [journal.records.get(str(q), {}) for q in df[qid_col]]
    usage = [r.get("usage") or {} for r in recs]
    cells = [_prediction_cells(r, max_prediction_bytes) for r in recs]
    df["prediction"] = [prediction for prediction, _ in cells]
    df["error"] = [(error or "").split("\n")[0] or None for _, error in cells]
    df["seconds"] = [r.get("seconds") for r in recs]
    for key in ("prompt_tokens", "completion_tokens", "cost_usd"):
        df[key] = [u.get(key) for u in usage]
    atomic_write_csv(path, df, agent_text=True, sync=sync)
