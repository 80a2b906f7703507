"""IMO-Bench data on disk: the bundled copy and the check of its whole folder. Checked loading of
one file, for every domain, is domains/data.py's."""

from __future__ import annotations

from pathlib import Path

from domains.data import SUMS_NAME, load_csv, read_checksums, sha256_file, verify_file  # noqa: F401 (IMO modules' names)
from services.errors import UserError

DATA_DIR = Path(__file__).resolve().parent / "data"


def format_checksums(checksums: dict[str, str]) -> str:
    """The SHA256SUMS text for {file name: sha256}, sorted by name, as `sha256sum -c` reads it."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(checksums.items()))


def verify_folder(folder: str | Path) -> int:
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
