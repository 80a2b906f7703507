"""The folders this process holds, and which failures to write are this machine's, not a caller's.

A write the machine fails (a full disk or quota, a file system turned read-only, an I/O error; below a
held folder, that folder gone or no longer writable) is MachineDown naming the path and the cause: the
run stops resumably, and nothing that write was part of is recorded as an agent's failure. Every other
error of a write stays what it is. `services.fsutil`'s writers raise through `host_write`.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from services.errors import MachineDown, machine_failure

# Folders whose insides this process writes without following a link or opening a special file: a run
# it holds (hold_folder), the folder an analysis or an ensemble writes in. Above them the path is the
# user's (a home reached through a link is theirs); below them, it is a handed folder's.
_GUARDED: set[str] = set()


def guard_folder(folder: str | Path) -> None:
    """From now on, every `atomic_write_*` and `make_folder` of this process below `folder` passes through
    no link and no special file planted there (`write_below`); one is refused in one line naming it."""
    _GUARDED.update({os.path.abspath(folder), os.path.realpath(folder)})


def guarded(path: str | Path) -> tuple[str, str] | None:
    """(the guarded folder `path` is below, `path` relative to it), or None."""
    full = os.path.abspath(path)
    for root in _GUARDED:
        if full.startswith(root.rstrip(os.sep) + os.sep):
            return root, full[len(root.rstrip(os.sep)) + 1:]
    return None


def write_failure(error: OSError, path: str | Path) -> MachineDown | None:
    """MachineDown when `error`, met writing `path`, is the machine's: a full disk or quota, a file system
    turned read-only, an I/O error (`services.errors.HOST_ERRNOS`), or, below a held folder (the run's),
    that folder gone or no longer writable; None for any other error."""
    below = guarded(path)
    root = Path(below[0]) if below is not None else None
    down = machine_failure(error, str(path), root)
    if down is not None or root is None or error.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES,
                                                                 errno.EPERM):
        return down
    # A folder below the run may be an agent's to remove or lock (its sandbox's): the run's own is not.
    if not os.path.isdir(root):
        return MachineDown(f"the folder {root} is gone: cannot write {path} ({error.strerror})", root)
    if not os.access(root, os.W_OK):
        return MachineDown(f"the folder {root} is no longer writable: cannot write {path} ({error.strerror})", root)
    return None


@contextlib.contextmanager
def host_write(path: str | Path) -> Iterator[None]:
    """Within: an OSError that is the machine's failure to write `path` (`write_failure`) is raised as
    MachineDown; any other stays as it is."""
    try:
        yield
    except OSError as e:
        down = write_failure(e, path)
        if down is None:
            raise
        raise down from e


def disk_down(folder: str | Path) -> MachineDown | None:
    """MachineDown when the file system of `folder` can take no more writes (no free block, read-only) or
    `folder` is gone: why a command that wrote there (git) failed, told without reading its output."""
    try:
        info = os.statvfs(folder)
    except FileNotFoundError:
        return MachineDown(f"the folder {folder} is gone")
    except OSError:
        return None
    if info.f_flag & os.ST_RDONLY:
        return MachineDown(f"the file system of {folder} is read-only")
    if info.f_bavail == 0 or (info.f_files and info.f_favail == 0):  # no block, or no inode left
        return MachineDown(f"the file system of {folder} is full")
    return None
