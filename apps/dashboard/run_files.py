"""Bounded reads of a run folder's files for the dashboard's pages: a text (a patch, a transcript), an
evaluation's journal and its gold labels. Each reads below the run's folder with no link followed, within a
size, and says why a file is not shown instead of failing the page."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from archive.eval_store import JOURNAL, PREDICTIONS
from archive.run_state import json_objects
from services.fsutil import read_below
from services.render import csv_value

MAX_TEXT = 2**20  # a patch or transcript shown on a page; the rest is cut, and the page says so
MAX_JOURNAL = 2**25  # a split's predictions.jsonl
MAX_PREDICTIONS = 2**26  # a split's predictions.csv, read for its labels


@dataclass
class Text:
    """Text read from the run for a page, with why it is missing or whether it was cut."""

    text: str = ""
    cut: bool = False
    missing: str | None = None


def read_text(run_dir: Path, relative: str, limit: int = MAX_TEXT, tail: bool = False,
              none: str = "none was written") -> Text:
    """A text file of the run, bounded (its end with `tail`), no link followed; what stopped it, when it is not."""
    try:
        data, cut = read_below(run_dir, relative, limit, tail)
    except FileNotFoundError:
        return Text(missing=none)
    except OSError as e:
        return Text(missing=f"not shown: {e.strerror or e}")
    return Text(data.decode("utf-8", errors="replace"), cut)


def read_labels(run_dir: Path, key: str, id_column: str, label_column: str) -> dict[str, str]:
    """Row id -> gold label, from evaluation `key`'s predictions.csv, bounded; {} when it cannot be read."""
    try:
        data, _ = read_below(run_dir, f"evals/{key}/{PREDICTIONS}", MAX_PREDICTIONS)
    except OSError:
        return {}
    try:  # pandas, as the project reads its CSVs: no limit on a cell's size (a long prediction)
        table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, usecols=[id_column, label_column],
                            encoding_errors="replace")
    except (ValueError, pd.errors.ParserError):
        return {}  # no such columns, or not a CSV
    return {csv_value(q): csv_value(label) for q, label in zip(table[id_column], table[label_column])}


def read_journal(run_dir: Path, key: str) -> list[dict]:
    """An evaluation's predictions: id, prediction and error of each row, as text."""
    try:
        data, _ = read_below(run_dir, f"evals/{key}/{JOURNAL}", MAX_JOURNAL)
    except OSError:
        return []
    rows = []
    for row in json_objects(data):
        if "id" in row:
            rows.append({"id": str(row["id"]), "prediction": "" if row.get("prediction") is None
                         else str(row["prediction"]), "error": "" if row.get("error") is None else str(row["error"])})
    return rows
