"""Folders as data between the controller and a Ray worker node: what a remote sandbox's
workspace and mounts hold travels as a file map {relative path: (executable, bytes)}.

A map is read without following any link (services.workspace.read_workspace: regular files
only, within a quota) and written below a folder with no-follow writes
(services.workspace.write_files). One quota bounds all that crosses for a sandbox:
no file over `sandbox.file_size_mb`, all of them within `sandbox.disk_mb`, which is what
the sandbox may write anyway. What comes back from a worker node holds what agent code
wrote: `checked` takes it apart again on the controller (types, paths, sizes) before
anything of it is written.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

from services.config import SandboxConfig
from services.errors import UserError
from services.sandbox.disk_room import MAX_ENTRIES
from services.workspace import Quota, read_workspace, write_files

FileMap = dict[str, tuple[bool, bytes]]
MAX_DROPPED = 1000  # names of files left out that are reported back, at most
SINGLE = ""  # the path of a mount that is one file, not a folder


def quota_of(config: SandboxConfig) -> Quota:
    """What may cross for one sandbox, each way."""
    total = int(config.disk_mb * 2**20)
    return Quota(file_bytes=min(int(config.file_size_mb * 2**20), total), total_bytes=total, files=MAX_ENTRIES)


def used(files: FileMap) -> int:
    return sum(len(data) for _, data in files.values())


def less(quota: Quota, files: FileMap) -> Quota:
    """The quota left once `files` crossed."""
    return replace(quota, total_bytes=max(0, quota.total_bytes - used(files)),
                   files=max(0, quota.files - len(files)))


def read_tree(path: Path, quota: Quota, only: tuple[str, ...] | None = None) -> tuple[FileMap, dict[str, str]]:
    """The regular files under the folder `path` (or the file `path` itself, as path SINGLE), and
    what was left out and why (at most MAX_DROPPED names)."""
    if not os.path.isdir(path) or os.path.islink(path):
        return _read_single(path, quota)
    snap = read_workspace(path, quota, only=only)
    return snap.files, dict(list(snap.dropped.items())[:MAX_DROPPED])


def _read_single(path: Path, quota: Quota) -> tuple[FileMap, dict[str, str]]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return {}, {SINGLE: f"unreadable ({os.strerror(e.errno or 0)})"}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {}, {SINGLE: "not a regular file"}
        limit = min(quota.file_bytes, quota.total_bytes)
        parts, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            parts.append(chunk)
            size += len(chunk)
        if size > limit:
            return {}, {SINGLE: f"over the quota of {limit} bytes"}
        return {SINGLE: (bool(info.st_mode & 0o100), b"".join(parts))}, {}
    finally:
        os.close(fd)


def read_to_send(path: Path, quota: Quota, what: str) -> FileMap:
    """A trusted folder or file of the controller to send to a worker node, whole: a UserError
    when it does not fit the quota (links and caches are never sent)."""
    files, dropped = read_tree(path, quota)
    over = [name for name, why in dropped.items() if "quota" in why]
    if over:
        raise UserError(f"{what} {path} holds more than a worker node may receive (sandbox.disk_mb "
                        f"{quota.total_bytes // 2**20} MB, files of at most {quota.file_bytes // 2**20} MB): "
                        f"{over[0] or path.name}")
    return files


def checked(value: object, quota: Quota) -> FileMap:
    """A file map that came back from a worker node, kept only as far as it is one: string paths
    (checked again when written), boolean flags, byte contents; within the quota."""
    files: FileMap = {}
    if type(value) is not dict:
        return files
    total = 0
    for path, entry in value.items():
        if len(files) >= quota.files:
            break
        if type(path) is not str or type(entry) is not tuple or len(entry) != 2:
            continue
        executable, data = entry
        if type(executable) is not bool or type(data) is not bytes or len(data) > quota.file_bytes:
            continue
        if total + len(data) > quota.total_bytes:
            continue
        total += len(data)
        files[path] = (executable, data)
    return files


def place(target: Path, files: FileMap) -> list[str]:
    """Make `target` (not there yet) the file of a one-file map, or a folder holding `files`;
    returns the paths that could not be written."""
    if SINGLE in files:
        executable, data = files[SINGLE]
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if executable else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return []
    target.mkdir(mode=0o755)
    return write_files(target, files)


def replace_tree(root: Path, files: FileMap) -> list[str]:
    """Make the folder `root` hold exactly `files`; returns the paths that could not be written."""
    clear(root)
    return write_files(root, files)


def clear(root: Path) -> None:
    """Remove what the folder `root` holds, keeping the folder; links are removed, never followed."""
    with os.scandir(root) as entries:
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass
