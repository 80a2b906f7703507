"""Atomic file writes (a reader sees the old file or the new one, never half of one), and
bounded reads that follow no link.

Below a folder someone may have handed over (a run this process holds, the folder an analysis or an
ensemble writes in: `guard_folder`), no write passes through a link or a special file planted there:
each folder is opened without following a link, each file is made afresh beside its name and renamed
over it (which replaces a link rather than following it), a log is appended to only when it is a
regular file of one name, and the run's `.lock` is refused when it is a hard link.

A write never fails for what the text holds: a lone surrogate (a file name that was not UTF-8,
text an agent returned) is written as its backslash escape, which in JSON reads back as itself. One the
machine fails (a full disk, ...) raises MachineDown naming the path (`services.write_failures`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
import stat
from pathlib import Path
from typing import IO, TYPE_CHECKING

from services.errors import UserError
from services.write_failures import guard_folder, guarded, host_write

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Buffer


def atomic_write_bytes(path: str | Path, data: bytes, sync: bool = True) -> None:
    """`data` as the file `path`. `sync=False` skips the fsync: still atomic, not durable across a
    crash of the machine; for files that are made again at will (the tests' synthetic runs write
    thousands, and a sync each would cost them most of their time)."""
    below = guarded(path)
    if below is not None:
        write_below(*below, data, sync)
        return
    path = Path(path)
    with host_write(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _replace_in(folder, path.name, data, sync)
        finally:
            os.close(folder)


class NotWritable(UserError, OSError):
    """A link, special file or hard link where a file or folder of a run was to be written: one line naming
    it (a UserError); an OSError to the writers that go on without their log."""


def _parts(root: str | Path, relative: str) -> list[str]:
    parts = [p for p in str(relative).split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OSError(f"{relative!r} is not a path below {root}")
    return parts


def _folder_below(root: str | Path, parts: list[str], create: bool) -> int:
    """A descriptor of the folder `root`/`parts`, each part made when missing (with `create`) and opened
    without following a link; NotWritable naming the first part that is a link or no folder."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
            try:
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise NotWritable(f"{Path(root, *parts[:i + 1])} is a link or not a folder: nothing is written "
                                  "through it") from None
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _replace_in(folder: int, name: str, data: bytes, sync: bool) -> None:
    """`data` as the file `name` of the open `folder`: written to a fresh file beside it (never an
    existing one, never through a link), then renamed over the name (a link there is replaced, not
    followed)."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, 0o644)  # not 0600, which would hide the file from a sandbox's own user (docker)
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise


def write_below(root: str | Path, relative: str, data: bytes, sync: bool = True) -> None:
    """`data` as the file `relative` under the folder `root`, atomically, its folders made as needed; no
    component below `root` may be a link or other than a folder (a UserError names it). For folders
    someone may have handed over, where a planted `analysis -> ~/` would take the write elsewhere."""
    parts = _parts(root, relative)
    if not parts:
        raise OSError(f"{relative!r} is not a path below {root}")
    with host_write(Path(root, *parts)):
        folder = _folder_below(root, parts[:-1], create=True)
        try:
            _replace_in(folder, parts[-1], data, sync)
        finally:
            os.close(folder)


class AppendFile(io.FileIO):
    """A file `open_append` opened, unbuffered: each `write` appends all its bytes or none (one that the
    disk cut short is taken back, so a full disk leaves no half line for the next one to join), and a
    failure of the machine is MachineDown (`host_write`), also from `sync`."""

    def __init__(self, fd: int, path: Path) -> None:
        super().__init__(fd, "a+")
        self.path = path

    def write(self, data: Buffer) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        with host_write(self.path):
            end = os.lseek(self.fileno(), 0, os.SEEK_END)
            try:
                while view:
                    view = view[super().write(view) or 0:]
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(self.fileno(), end)
                raise
        return size

    def sync(self) -> None:
        """What was written, on the disk (fsync)."""
        with host_write(self.path):
            os.fsync(self.fileno())


def open_append(path: str | Path) -> AppendFile:
    """`path` opened to append (and read), made if missing: never through a link, a fifo or a device, nor a
    hard link whose other name would grow; below a guarded folder, through no link either."""
    path, below = Path(path), guarded(path)
    with host_write(path):
        folder = _folder_below(below[0], _parts(*below)[:-1], create=True) if below is not None else \
            os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644, dir_fd=folder)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise NotWritable(f"{path} is a link: nothing is written through it") from None
        finally:
            os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        kind = f"a file of {info.st_nlink} names (a hard link)" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)
        raise NotWritable(f"{path} is {kind}: nothing is written to it")
    os.set_blocking(fd, True)
    return AppendFile(fd, path)


def make_folder(path: str | Path) -> None:
    """`path` made with its parents if missing (mkdir -p); below a guarded folder, through no link."""
    below = guarded(path)
    with host_write(path):
        if below is None:
            Path(path).mkdir(parents=True, exist_ok=True)
            return
        os.close(_folder_below(below[0], _parts(*below), create=True))


def atomic_write_text(path: str | Path, text: str, sync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"), sync)


def atomic_write_json(path: str | Path, obj: object, sync: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", sync)


def atomic_write_csv(path: str | Path, df: pd.DataFrame, agent_text: bool = False, sync: bool = True) -> None:
    """`df` as a CSV file. With `agent_text`, every text cell that a spreadsheet would run as a
    formula is written as text (`services.render.csv_cell`), and rows end in CRLF (RFC 4180), so that
    a cell holding a lone CR is quoted rather than read back as two rows; `read_csv_text` reads it
    back exactly."""
    if not agent_text:
        atomic_write_text(path, df.to_csv(index=False), sync)
        return
    from services.render import csv_cell

    marked = df.copy()
    for i, (_, column) in enumerate(df.items()):
        if not _kept_by_csv_cell(column):
            marked.isetitem(i, column.map(csv_cell))
    atomic_write_text(path, marked.to_csv(index=False, lineterminator="\r\n"), sync)


def _kept_by_csv_cell(column: pd.Series) -> bool:
    """Whether mapping `csv_cell` over `column` gives it back as it is, cells and dtype, so that it
    need not be mapped (which costs as much as writing it): integers, booleans and float64s, and
    pandas' string columns with no cell to mark. Not object columns, whose dtype a map infers anew."""
    import numpy as np
    import pandas as pd

    from services.render import csv_cell

    dtype = column.dtype
    if isinstance(dtype, np.dtype):
        return dtype.kind in "biu" or dtype == np.float64
    return isinstance(dtype, pd.StringDtype) and all(csv_cell(v) is v for v in column)


def read_csv_text(source: str | Path | IO[bytes]) -> pd.DataFrame:
    """A CSV written with `atomic_write_csv(..., agent_text=True)` (a path, or a binary file), every
    cell as the text it was written from (empty cells stay "")."""
    import pandas as pd

    return csv_values(pd.read_csv(source, dtype=str, keep_default_na=False))


def csv_values(df: pd.DataFrame) -> pd.DataFrame:
    """`df`, read from a CSV that `atomic_write_csv(..., agent_text=True)` wrote, with each cell's
    formula marking undone (`services.render.csv_value`)."""
    from services.render import csv_value

    return df.map(csv_value)


def open_regular(path: str | Path, limit: int, follow_links: bool = False) -> IO[bytes]:
    """`path` open for reading if it is a regular file of at most `limit` bytes; an OSError saying what
    it is otherwise (without the path: callers name it). Never blocks on a fifo; a link is followed only
    with `follow_links` (a user may link the config they name, never a run's records). For a file too
    large to read whole: the caller streams it and stops at `limit` (it may grow after this check)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    below = None if follow_links else guarded(path)
    if below is None:
        fd = os.open(path, flags)
    else:  # below a held run: no folder on the way is a link either (evals/<key> planted as one)
        parts = _parts(*below)
        try:
            folder = _folder_below(below[0], parts[:-1], create=False)
        except NotWritable as e:
            raise OSError(str(e).replace("nothing is written through it", "nothing is read through it")) from None
        try:
            fd = os.open(parts[-1], flags, dir_fd=folder)
        finally:
            os.close(folder)
    try:  # before fdopen, which refuses a folder itself, naming the descriptor's number
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise OSError(f"{info.st_size} bytes, over the limit of {limit} bytes")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, limit: int, follow_links: bool = False) -> bytes:
    """The bytes of `path` if it is a regular file of at most `limit` bytes: see `open_regular`."""
    with open_regular(path, limit, follow_links) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"over the limit of {limit} bytes")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def read_bounded(path: str | Path, limit: int = 64 * 2**20) -> bytes:
    """`read_regular` of a file the core wrote (a link is refused), its errors naming `path`."""
    try:
        return read_regular(path, limit)
    except OSError as e:
        if e.errno is not None:  # from the system (a link, no such file): it names the path itself
            raise
        raise OSError(f"{path} is {e}") from None


def read_below(root: str | Path, relative: str, limit: int, tail: bool = False) -> tuple[bytes, bool]:
    """The first `limit` bytes of the regular file `relative` under the folder `root` (its last ones
    with `tail`), and whether there was more. No component of `relative` may be a link, and the
    file must be a regular one (a fifo would block): OSError otherwise. For files an agent could
    have planted."""
    parts = [p for p in str(relative).split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(f"{relative!r} is not a path below {root}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = below
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as f:
        info = os.fstat(file_fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{relative} is not a regular file")
        if tail:
            start = max(info.st_size - limit, 0)
            f.seek(start)
            return f.read(limit), start > 0
        data = f.read(limit + 1)
    return data[:limit], len(data) > limit


_HELD: dict[str, int] = {}  # folder -> the open lock file this process holds it by, until it exits


def hold_folder(folder: str | Path, what: str) -> None:
    """Hold `folder` for this process, through an exclusive lock on `folder/.lock` that the kernel
    drops when the process ends (also on kill -9): a second process that would write the same
    run (a resumed loop, an --evaluate) gets a UserError naming the holder's pid. Holding twice
    is a no-op. `what` names the folder in the message ("run", "group")."""
    import fcntl

    path = Path(folder) / ".lock"
    if str(path) in _HELD:
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise UserError(f"{folder}: cannot lock the {what} ({e.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:  # a hard link would take the pid to another file
        os.close(fd)
        kind = f"a file of {info.st_nlink} names (a hard link)" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)
        raise UserError(f"{path} is {kind}, not a lock file of the {what}; remove it, then rerun")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise UserError(f"{folder}: the {what} is in use by another process"
                        + (f" (pid {holder})" if holder.isdigit() else "")
                        + "; wait for it to end or stop it, then rerun") from None
    with host_write(path):
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    _HELD[str(path)] = fd
    guard_folder(folder)


def release_folder(folder: str | Path) -> None:
    """Let go of a folder `hold_folder` held, for a process that lives on after its run (a Python
    session using the API), so another process may resume the run; a folder not held is a no-op."""
    fd = _HELD.pop(str(Path(folder) / ".lock"), None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor of the open file drops its flock
