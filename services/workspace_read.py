"""A workspace read back as data (services/workspace.py's RunRepo.capture reads the meta agent's folder here): the
regular files of the evolvable paths, within a quota, with no link followed and no name taken that could act
(git metadata, a .pth start-up hook, an unprintable name), and what was left out and why."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from services.render import name as stored_name

# Everything the meta agent may edit; the rest of the project is trusted core.
EVOLVABLE_PATHS = ("agent", "task_agent", "meta_agent", "select_next_parent.py", "ensemble.py")
_CACHES = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
_MAX_DEPTH = 24  # folders deeper than this are not agent code


@dataclass(frozen=True)
class Quota:
    """How much of a workspace is taken as agent code."""

    file_bytes: int = 5 * 2**20  # one file
    total_bytes: int = 50 * 2**20  # all files
    files: int = 5000  # number of files


@dataclass
class Snapshot:
    """A workspace read as data: the files kept, and what was left out and why."""

    files: dict[str, tuple[bool, bytes]] = field(default_factory=dict)  # path -> (executable, content)
    dropped: dict[str, str] = field(default_factory=dict)  # path (escaped: services.render.name) -> reason


def _unsafe_name(name: str) -> str | None:
    """Why a file or folder name is not taken, or None."""
    if name.startswith(".git"):
        return "git metadata"
    if name.endswith(".pth"):
        return "a Python start-up hook"
    if not name.isprintable() or any(ch in name for ch in '\\"'):
        return "an unprintable name"
    return None


def read_workspace(root: str | Path, quota: Quota = Quota(),
                   only: tuple[str, ...] | None = EVOLVABLE_PATHS) -> Snapshot:
    """The regular files of the evolvable paths under `root` (of every top-level name with
    `only=None`), read without following any link.

    Every folder is opened relative to its parent with O_NOFOLLOW and every file with
    O_NOFOLLOW | O_NONBLOCK, then checked with fstat: a link, fifo, device or socket is
    reported, never opened or followed. A dropped path is reported as escaped text
    (`services.render.name`): a name of any bytes (not UTF-8, controls) fits every record.
    """
    reader = _Reader(quota, only)
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        reader.folder(top, "", 0)
    finally:
        os.close(top)
    snap = reader.snap
    snap.dropped = {stored_name(path): why for path, why in snap.dropped.items()}
    return snap


class _Reader:
    """One pass of read_workspace: what it kept and dropped so far, and the bytes it kept."""

    def __init__(self, quota: Quota, only: tuple[str, ...] | None) -> None:
        self.quota, self.only, self.snap, self.total = quota, only, Snapshot(), 0

    def folder(self, dir_fd: int, rel: str, depth: int) -> None:
        with os.scandir(dir_fd) as entries:
            names = sorted(e.name for e in entries)
        for name in names:
            path = f"{rel}/{name}" if rel else name
            if name in _CACHES or name.endswith(".pyc"):
                continue
            why = _unsafe_name(name) or (None if rel or self.only is None or name in self.only
                                         else "outside the evolvable paths")
            fd = None if why else self._open(dir_fd, name, path)
            if why:
                self.snap.dropped[path] = why
            if fd is None:
                continue
            try:
                self._entry(fd, path, depth)
            finally:
                os.close(fd)

    def _open(self, dir_fd: int, name: str, path: str) -> int | None:
        """`name` opened without following a link, when it is a folder or a regular file; else None, and why."""
        try:
            kind = stat.S_IFMT(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            if kind not in (stat.S_IFDIR, stat.S_IFREG):
                self.snap.dropped[path] = "a link" if kind == stat.S_IFLNK else "not a regular file"
                return None
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as e:  # replaced since it was listed: a link now, or gone
            self.snap.dropped[path] = f"unreadable ({os.strerror(e.errno or 0)})"
            return None

    def _entry(self, fd: int, path: str, depth: int) -> None:
        """An opened entry, checked with fstat: a folder walked, a regular file kept within the quota."""
        info, quota, dropped = os.fstat(fd), self.quota, self.snap.dropped
        if stat.S_ISDIR(info.st_mode):
            if depth >= _MAX_DEPTH:
                dropped[path] = "nested too deep"
            else:
                self.folder(fd, path, depth + 1)
        elif not stat.S_ISREG(info.st_mode):
            dropped[path] = "not a regular file"
        elif info.st_size > quota.file_bytes:
            dropped[path] = f"{info.st_size} bytes, over the quota of {quota.file_bytes} for one file"
        elif self.total + info.st_size > quota.total_bytes or len(self.snap.files) >= quota.files:
            dropped[path] = "over the workspace quota"
        else:
            data = _read_at_most(fd, quota.file_bytes + 1)
            if len(data) > quota.file_bytes:  # grew since fstat
                dropped[path] = f"over the quota of {quota.file_bytes} bytes for one file"
            else:
                self.total += len(data)
                self.snap.files[path] = (bool(info.st_mode & 0o100), data)


def _read_at_most(fd: int, limit: int) -> bytes:
    parts, size = [], 0
    while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)
