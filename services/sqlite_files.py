"""The files of a SQLite database in a folder someone else may have written (a run's ledger): which
ones SQLite would open beside it, what is wrong with one, and how to open it so that nothing is
written beside it (services/ledger.py's LedgerReader and the check a resume runs before it writes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# Bytes of data (holes not counted) of the database, and of its -wal, copied to read a -wal that has no -shm.
# A call's row is ~200 bytes, so a paper-sized run (tens of thousands of calls) books a few MB of calls; the
# response cache (temperature-0 answers, a few KB each) fits tens of thousands of answers besides; a -wal is
# checkpointed at ~4 MB. A file with more is a stranger's, and copying it would fill the temp folder.
MAX_COPY = 256 * 2**20
CHUNK = 2**20  # bytes of a copy read and written at a time: all of it this process ever holds


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
def readable(path: Path, deadline: float | None = None) -> Iterator[str]:
    """A URI that reads the database at `path` and writes nothing beside it; OSError when a copy fails
    (TimeoutError past `deadline`, a time.monotonic() value: the reader's budget covers the copy too).
    No `-wal`: immutable (no lock, no file made). A `-wal` and a `-shm`: read-only with a read-only index
    (`readonly_shm=1`: SQLite opens `-shm` O_RDONLY, so a `-shm` that is a hard link to a file of the user
    is read, never truncated); while a run writes, this shares its index (the dashboard sees each call as
    it is booked), else SQLite builds one in its memory from the `-wal` (a killed run's last calls, which
    immutable would skip). A `-wal` alone (a folder copied without its `-shm`): both copied (`_copy`: a
    chunk at a time, holes left holes, at most MAX_COPY bytes of data each) to a private folder (mkdtemp),
    and the copy read. Copying every time would cost the dashboard a whole ledger per page of a running run;
    telling a running run by its `.lock` would take a lock beside the writer's, and immutable would still
    skip a killed run's `-wal`."""
    wal = Path(f"{path}-wal")
    if not wal.exists() or Path(f"{path}-shm").exists():
        yield f"{path.resolve().as_uri()}?{'mode=ro&readonly_shm=1' if wal.exists() else 'immutable=1'}"
        return
    with tempfile.TemporaryDirectory(prefix="ledger-") as private:
        copy = Path(private, "ledger.sqlite")
        for source, target in ((path, copy), (wal, Path(f"{copy}-wal"))):
            try:
                _copy(source, target, deadline)
            except TimeoutError:
                raise TimeoutError(f"copying {source.name} ran out of time") from None
            except OSError as e:
                raise OSError(f"{source.name}: {e.strerror or e}") from None
        yield copy.as_uri()


def _copy(source: Path, target: Path, deadline: float | None) -> None:
    """Copy `source` to a new file `target` of its size, CHUNK bytes at a time, writing only its data: a
    sparse file of a terabyte costs nothing, one with over MAX_COPY bytes of data is refused before more is
    read, a slow one stops at `deadline` (TimeoutError). A link is not followed, a fifo not waited on (its
    open does not block: O_NONBLOCK), a device not read (S_ISREG); the size is the one at the open, so a file
    that grows meanwhile is copied as it was."""
    fd = _open_regular(source)
    try:
        size = os.fstat(fd).st_size
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(out, size)  # its holes, as holes
            copied = 0
            for start, end in _data(fd, size):
                for at in range(start, end, CHUNK):
                    if deadline is not None and time.monotonic() > deadline:
                        raise TimeoutError("past the deadline")
                    chunk = os.pread(fd, min(CHUNK, end - at), at)
                    copied += len(chunk)
                    if copied > MAX_COPY:
                        raise OSError(f"over {MAX_COPY / 2**20:g} MiB of data to copy (a -wal without its -shm "
                                      "is read from a copy)")
                    _write_at(out, chunk, at)
                    if len(chunk) < min(CHUNK, end - at):  # shorter since the open: copied as far as it goes
                        os.ftruncate(out, at + len(chunk))
                        return
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _open_regular(path: Path) -> int:
    """A read-only descriptor of `path`, if it is a regular file and not a link; OSError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError("a link, not followed") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError("not a regular file")
    return fd


def _data(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The (start, end) ranges of the first `size` bytes of `fd` that hold data, skipping the holes the file
    system reports (SEEK_DATA, SEEK_HOLE); where it reports none (EINVAL, no SEEK_DATA), all of what is left."""
    at = 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except AttributeError:  # a platform without SEEK_DATA
            yield at, size
            return
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past `at`
                return
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            yield at, size
            return
        if start >= size:
            return
        yield start, min(end, size)
        at = end


def _write_at(fd: int, data: bytes, at: int) -> None:
    """All of `data` at offset `at` of `fd` (pwrite may write part of it)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written
