"""What a harness run leaves in its folder: the journal of finished rows and predictions.csv.

Every finished row is appended to `predictions.jsonl` at once (and synced), so a killed
run loses only the rows in flight and a resumed one pays nothing for the rows it holds.
`predictions.csv`, the seed's output format, is rewritten whole and atomically from the
journal, its cells safe to open in a spreadsheet (a prediction that would run as a formula
gets a leading `'`: `services.render.csv_cell`); the project's readers undo that
(`services.fsutil.csv_values`), and the journal keeps the text exactly.
"""

from __future__ import annotations

import json
import json.scanner
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from inside.worker import utf8_text
from services.errors import UserError
from services.fsutil import AppendFile, atomic_write_csv, open_append, open_regular

if TYPE_CHECKING:
    import pandas as pd

JOURNAL = "predictions.jsonl"
PREDICTIONS = "predictions.csv"
RESULT_COLUMNS = ["prediction", "error", "seconds", "prompt_tokens", "completion_tokens", "cost_usd"]


MAX_JOURNAL = 2**30  # bytes: 100 rows of 1 MB predictions, retried ten times each, fit ten times over
MAX_LINE = 6 * 2**20 + 65536  # bytes of one record: a prediction at the default cap (harness.max_prediction_bytes),
# each byte spelled in up to 6 characters of JSON, and its few short fields; a longer line is read as a cut one
MAX_FIELDS = 64  # of a record's object and of its usage: a record has 7
# Each field a record may have, and the types its value may take (a handed journal's other fields are dropped).
_FIELDS = {"id": (str, int), "prediction": (str, type(None)), "error": (str, type(None)),
           "seconds": (int, float, type(None)), "usage": (dict,), "token": (str,), "inputs_sha": (str, type(None))}


class _FlatRecords(json.JSONDecoder):
    """JSON of a record's shape only: an object of at most MAX_FIELDS values, each text, a number, null or
    one such object (usage). An array, an object below that or one more field is refused where it starts,
    so a hostile line cannot make the parser build millions of containers (64 MiB of `[[],[],...]` took
    1.7 GB and 25 s) or of fields."""

    def __init__(self) -> None:
        super().__init__()
        depth, plain = [0], self.parse_object

        def parse_object(s_and_end: tuple, strict: bool, scan_once: Callable, *rest: object) -> tuple:
            if depth[0] >= 2:
                raise ValueError("an object below a record's usage")
            values = [0]

            def counted(s: str, end: int) -> tuple:
                values[0] += 1
                if values[0] > MAX_FIELDS:
                    raise ValueError(f"an object of more than {MAX_FIELDS} fields")
                return scan_once(s, end)

            depth[0] += 1
            try:
                return plain(s_and_end, strict, counted, *rest)
            finally:
                depth[0] -= 1

        def parse_array(*args: object) -> tuple:
            raise ValueError("an array: no field of a record holds one")

        self.parse_object, self.parse_array = parse_object, parse_array
        # the pure scanner reads the two above (typeshed lists only the C one)
        self.scan_once = json.scanner.py_make_scanner(self)  # pyright: ignore[reportAttributeAccessIssue]


def _record(line: bytes) -> dict | None:
    """The record a journal line holds, with only the fields a record has, each of its type; None if none."""
    try:
        rec = _FlatRecords().decode(line.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if type(rec) is not dict or type(rec.get("id")) not in (str, int):
        return None
    rec = {k: v for k, v in rec.items() if k in _FIELDS and type(v) in _FIELDS[k]}
    if "usage" in rec:
        rec["usage"] = {k: v for k, v in rec["usage"].items() if type(v) in (int, float)}
    return rec


def read_journal(path: Path, max_line: int = MAX_LINE) -> Iterator[dict]:
    """The records of the journal at `path`, in order, as bounded data: the journal of a run folder
    someone handed over (`--evaluate`, a resume) may be a link to a file of this host (or sit in a folder
    that is one), a fifo, gigabytes, or lines of any JSON; a one-line UserError naming the path for the
    first ones. A line that is cut short (a kill), longer than `max_line` or not a record is skipped: its
    row is answered again."""
    try:
        f = open_regular(path, MAX_JOURNAL)
    except OSError as e:
        raise UserError(f"{path} cannot be read as a journal: {e.strerror or e}") from None
    with f:
        while line := f.readline(max_line + 1):
            if not line.endswith(b"\n"):
                if len(line) > max_line:  # too long: its rest is skipped too
                    while (rest := f.readline(max_line)) and not rest.endswith(b"\n"):
                        pass
                continue
            if (rec := _record(line)) is not None:
                yield rec


class Journal:
    """Append-only record of finished rows; the last record of an id wins. `sync=False` leaves each
    line unsynced (see services.fsutil.atomic_write_bytes): same lines, for journals made at will."""

    def __init__(self, path: Path, sync: bool = True, max_prediction_bytes: int | None = None) -> None:
        self.path = path
        self.sync = sync
        self.records: dict[str, dict] = {}
        if path.exists() or path.is_symlink():
            max_line = MAX_LINE if max_prediction_bytes is None else 6 * max_prediction_bytes + 65536
            for rec in read_journal(path, max_line):
                self.records[str(rec["id"])] = rec
        self._file: AppendFile | None = None

    def done_ids(self) -> set[str]:
        return {qid for qid, rec in self.records.items() if not rec.get("error")}

    def append(self, rec: dict) -> None:
        """Journal `rec`: its line is on disk whole (and synced) before the row counts as finished. A write
        the machine fails (a full disk) is MachineDown and leaves no part of the line (AppendFile)."""
        if self._file is None:
            self._file = open_append(self.path)  # no link followed
            end = os.fstat(self._file.fileno()).st_size
            if end and os.pread(self._file.fileno(), 1, end - 1) != b"\n":
                self._file.write(b"\n")  # end the line a kill cut short, so this record stays whole
        self._file.write((json.dumps(rec, default=str) + "\n").encode())
        if self.sync:
            self._file.sync()
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
