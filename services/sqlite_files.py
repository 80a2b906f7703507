"""The files of a SQLite database in a folder someone else may have written (a run's ledger): which
ones SQLite would open beside it, what is wrong with one, and how to open it so that nothing is
written beside it (services/ledger.py's LedgerReader and the check a resume runs before it writes).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from services.fsutil import read_regular

MAX_COPY = 2**30  # bytes of the database, and of its -wal, copied to read a -wal that has no -shm


def sibling_files(path: Path) -> list[Path]:
    """The database and the files SQLite opens beside it."""
    return [path, *(Path(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]


def odd_file(file: Path, writer: bool) -> str | None:
    """What makes `file` unsafe to open (a link, a fifo, a device: a read would follow it, block or never
    end; for a `writer`, a hard link too, whose other name SQLite would write), None when it is missing or
    a plain file."""
    try:
        info = os.lstat(file)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return f"{file.name} is not a regular file"
    if writer and info.st_nlink > 1:
        return f"{file.name} is a hard link ({info.st_nlink} names)"
    return None


@contextlib.contextmanager
def readable(path: Path) -> Iterator[str]:
    """A URI that reads the database at `path` and writes nothing beside it; OSError when a copy fails.
    No `-wal`: immutable (no lock, no file made). A `-wal` and a `-shm`: read-only with a read-only index
    (`readonly_shm=1`: SQLite opens `-shm` O_RDONLY, so a `-shm` that is a hard link to a file of the user
    is read, never truncated); while a run writes, this shares its index (the dashboard sees each call as
    it is booked), else SQLite builds one in its memory from the `-wal` (a killed run's last calls, which
    immutable would skip). A `-wal` alone (a folder copied without its `-shm`): both copied, at most
    MAX_COPY bytes each, to a private folder (mkdtemp), and the copy read. Copying every time would cost
    the dashboard a whole ledger per page of a running run; telling a running run by its `.lock` would take
    a lock beside the writer's, and immutable would still skip a killed run's `-wal`."""
    wal = Path(f"{path}-wal")
    if not wal.exists() or Path(f"{path}-shm").exists():
        yield f"{path.resolve().as_uri()}?{'mode=ro&readonly_shm=1' if wal.exists() else 'immutable=1'}"
        return
    with tempfile.TemporaryDirectory(prefix="ledger-") as private:
        copy = Path(private, "ledger.sqlite")
        for source, target in ((path, copy), (wal, Path(f"{copy}-wal"))):
            try:
                target.write_bytes(read_regular(source, MAX_COPY))
            except OSError as e:
                raise OSError(f"{source.name}: {e.strerror or e}") from None
        yield copy.as_uri()
