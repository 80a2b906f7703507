"""IMO-Bench data on disk: the bundled copy, its checksums, and checked CSV loading."""

import csv
import hashlib
from pathlib import Path

import pandas as pd

from services.errors import UserError

DATA_DIR = Path(__file__).resolve().parent / "data"
SUMS_NAME = "SHA256SUMS"

# (resolved path, mtime_ns, size) -> sha256: the splits are reloaded for every
# evaluation and hashing a few MB each time is wasted work when nothing changed.
_hash_cache: dict[tuple[str, int, int], str] = {}


def read_checksums(folder) -> dict[str, str]:
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


def format_checksums(checksums: dict[str, str]) -> str:
    """The SHA256SUMS text for {file name: sha256}, sorted by name, as `sha256sum -c` reads it."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(checksums.items()))


def sha256_file(path) -> str:
    """Hex sha256 of a file, cached per (path, mtime, size) for this process."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _hash_cache:
        with open(path, "rb") as f:
            _hash_cache[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _hash_cache[key]


def verify_file(path) -> bool:
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


def verify_folder(folder) -> int:
    """Verify every file listed in `folder/SHA256SUMS`; returns how many were checked."""
    folder = Path(folder)
    checksums = read_checksums(folder)
    if not checksums:
        raise UserError(f"no checksums in {folder / SUMS_NAME}: the data folder is incomplete")
    for name in checksums:
        if not (folder / name).is_file():
            raise UserError(f"{folder / name} is listed in {SUMS_NAME} but missing; restore the file")
        verify_file(folder / name)
    return len(checksums)


def load_csv(path, required_columns=()) -> pd.DataFrame:
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
    if df.empty:
        raise UserError(f"{path} has no rows")
    missing = [c for c in required_columns if c not in df.columns]
    if missing:
        raise UserError(f"{path} is missing column(s) {', '.join(map(repr, missing))}; it has {', '.join(map(repr, df.columns))}")
    return df
