"""Atomic file writes (a reader sees the old file or the new one, never half of one), and
bounded reads that follow no link."""

import json
import os
import stat
import tempfile
from pathlib import Path


def atomic_write_bytes(path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from a sandbox's own user (docker)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_csv(path, df) -> None:
    atomic_write_text(path, df.to_csv(index=False))


def read_bounded(path, limit: int = 64 * 2**20) -> bytes:
    """The bytes of the regular file `path`, refusing a link, anything else that is not a
    regular file, and a file over `limit` bytes (OSError saying which)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path} is over {limit} bytes")
    return data


def read_below(root, relative: str, limit: int) -> tuple[bytes, bool]:
    """The first `limit` bytes of the regular file `relative` under the folder `root`, and whether
    there was more. No component of `relative` may be a link, and the file must be a regular
    one (a fifo would block): OSError otherwise. For files an agent could have planted."""
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
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            raise OSError(f"{relative} is not a regular file")
        data = f.read(limit + 1)
    return data[:limit], len(data) > limit
