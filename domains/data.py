"""Data files on disk, for every domain: checksums beside them, and checked loading of a table
(CSV, JSON lines or parquet) as strings, so that a label compares the same whatever its format."""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from services.errors import UserError
from services.fsutil import read_regular
from services.user_files import decode_utf8, parse_json

SUMS_NAME = "SHA256SUMS"
TABLE_FORMATS = (".csv", ".jsonl", ".parquet")
MAX_JSONL_BYTES = 2**31  # a JSON-lines file is read whole; a data set of gigabytes is not one a loop evaluates

# (resolved path, mtime_ns, size) -> sha256: the splits are reloaded for every
# evaluation and hashing a few MB each time is wasted work when nothing changed.
_hash_cache: dict[tuple[str, int, int], str] = {}


def read_checksums(folder: str | Path) -> dict[str, str]:
    """Parse `folder/SHA256SUMS` (sha256sum format) into {file name: sha256}; {} when absent."""
    sums = Path(folder) / SUMS_NAME
    if not sums.is_file():
        return {}
    checksums = {}
    for lineno, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        digest, sep, name = line.partition(" ")
        name = name.strip().lstrip("*")
        if not sep or not name or len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
            raise UserError(f"{sums}:{lineno}: expected '<sha256>  <file name>', got {line!r}")
        checksums[name] = digest.lower()
    return checksums


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, cached per (path, mtime, size) for this process."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _hash_cache:
        with open(path, "rb") as f:
            _hash_cache[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _hash_cache[key]


def verify_file(path: str | Path) -> bool:
    """Check a file against the SHA256SUMS beside it; True if listed and matching.

    A file not listed there is data the user brought, so it passes (False).
    """
    path = Path(path)
    expected = read_checksums(path.parent).get(path.name)
    if expected is None:
        return False
    actual = sha256_file(path)
    if actual != expected:
        raise UserError(
            f"checksum mismatch for {path}: expected {expected}, got {actual}; "
            "re-run `python -m domains.imo.setup` or restore the file"
        )
    return True


def load_csv(path: str | Path, required_columns: Sequence[str] = ()) -> pd.DataFrame:
    """Read a CSV as strings (empty cells stay ""), after checking its checksum and columns."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder, expected a CSV file")
    if not path.is_file():
        raise UserError(f"data file not found: {path}")
    verify_file(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise UserError(f"{path} has no rows (the file is empty)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, csv.Error) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} has no rows that parse as CSV: {reason}") from None
    return _with_columns(df, path, required_columns)


def load_table(path: str | Path, required_columns: Sequence[str] = ()) -> pd.DataFrame:
    """A CSV, JSON-lines or parquet file as a table of strings (missing values as ""), its columns
    checked; a UserError in one line naming the file otherwise."""
    path = Path(path)
    kind = path.suffix.lower()
    if kind == ".csv":
        return load_csv(path, required_columns)
    if kind not in TABLE_FORMATS:
        raise UserError(f"{path}: expected a {', '.join(TABLE_FORMATS)} file")
    if kind == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise UserError(f"{path}: reading parquet needs pyarrow, which is not installed (pip install pyarrow), "
                        "or give the data as CSV or JSON lines")
    if not path.is_file():
        raise UserError(f"data file not found: {path}")
    verify_file(path)
    df = _read_jsonl(path) if kind == ".jsonl" else _read_parquet(path)
    return _with_columns(df, path, required_columns)


def _with_columns(df: pd.DataFrame, path: Path, required_columns: Sequence[str]) -> pd.DataFrame:
    """`df`, read from `path`, once it has rows and every required column; a one-line UserError otherwise."""
    if df.empty:
        raise UserError(f"{path} has no rows")
    missing = [c for c in required_columns if c not in df.columns]
    if missing:
        raise UserError(f"{path} is missing column(s) {', '.join(map(repr, missing))}; "
                        f"it has {', '.join(map(repr, df.columns))}")
    return df


def _read_jsonl(path: Path) -> pd.DataFrame:
    try:
        text = decode_utf8(read_regular(path, MAX_JSONL_BYTES, follow_links=True))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = parse_json(line)
        except ValueError as e:
            raise UserError(f"{path}:{lineno}: not a JSON object ({str(e).splitlines()[0]})") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append({str(k): _text(v) for k, v in row.items()})
    return pd.DataFrame(rows, dtype=str).fillna("")


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow's errors have no common base short of Exception
        raise UserError(f"{path} is not a readable parquet file: {str(e).splitlines()[0] if str(e) else e}") from None
    return pd.DataFrame({str(c): [_text(v) for v in df[c].tolist()] for c in df.columns}, dtype=str)


def _text(value: object) -> str:
    """A cell as the text a CSV would hold: "" for a missing value, JSON for a list or a mapping."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
