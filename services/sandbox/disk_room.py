"""Room on the host's disks for what a sandbox writes: agent code never takes the room of the host's records.

A sandbox's writable folders (its workspace, its writable mounts: the harness's agent_evals/) lie on
the host's file systems, often beside the run's own records (the journal, the ledger, node records).
`sandbox.disk_mb` bounds what the folders hold, but a disk may have less room than that: an agent
that fills it would make the host's next write fail for a full disk, which is this machine's failure
(MachineDown: nothing recorded, and a resume reruns the agent, which fills it again). So each disk
under the folders keeps a reserve for the host (RESERVE_SHARE of it, at least RESERVE_MIN and at most
RESERVE_MAX, never more than a quarter of it):

* a sandbox does not open on a disk already short of its reserve (MachineDown: the machine has no
  room for an agent, whatever the agent would do);
* a sandbox's effective cap is min(disk_mb, the free space beyond the reserve): once a disk under its
  folders is short of its reserve and the sandbox's own writes there since it opened are a fair part of
  what the disk lost meanwhile (at least its floor, BLAME_FLOOR or a quarter of a small reserve, and at
  least half its share among the sandboxes open on that disk), the sandbox is stopped for it
  (`disk_capped`, the agent's failure), and the files it wrote there since it opened are removed,
  largest first, until the reserve and a floor more are free again, so the host's records, and a
  resume, have their room. A disk filled by anything else (the host, another program) stays the
  machine's: the host's write that fails is MachineDown, as before.

Free space is asked often (a statvfs: every FREE_CHECK_S in the sandbox's watch, and where the host is
about to keep what agent code did: services/sandbox/base.py); the folders are measured, besides the
watch's round every DISK_CHECK_S, as soon as a disk is short.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.errors import MachineDown

RESERVE_MIN = 256 * 2**20  # room kept for the host's records on a disk under a sandbox's folders...
RESERVE_SHARE = 0.05  # ...or this share of the disk, when more...
RESERVE_MAX = 2**30  # ...up to this, and never more than a quarter of the disk
BLAME_FLOOR = 64 * 2**20  # writes a sandbox must have made on a short disk to be stopped for it (less on a small disk)


def disk_space(path: str | Path) -> tuple[int, int]:
    """(size, bytes free to a writer without privileges) of the file system holding `path`."""
    info = os.statvfs(path)
    return info.f_blocks * info.f_frsize, info.f_bavail * info.f_frsize


def reserve_of(size: int) -> int:
    """The room kept for the host on a disk of `size` bytes."""
    return min(max(RESERVE_MIN, int(size * RESERVE_SHARE)), RESERVE_MAX, size // 4)


def mb(size: int) -> str:
    return f"{max(0, size) / 2**20:.0f}"


@dataclass
class Disk:
    """One file system under a sandbox's writable folders."""

    path: str  # a writable folder on it: where its free space is asked
    trees: list[int]  # the sandbox's writable folders on it (their indices)
    reserve: int
    free_at_open: int
    used_at_open: int = 0  # what those folders held when the sandbox opened
    scanned_free: int | None = None  # its free space when the folders were last measured while it was short

    @property
    def floor(self) -> int:
        return min(BLAME_FLOOR, self.reserve // 4)


@dataclass
class DiskRoom:
    """The disks under a sandbox's writable folders `trees`, as the sandbox opens (`used`: what each
    folder holds then); MachineDown when one is short of its reserve already."""

    trees: list[Path]
    used: list[int]
    opened: float = field(default_factory=time.time)
    disks: dict[int, Disk] = field(default_factory=dict)  # by device
    scanned_at: float = 0.0  # when the folders were last measured while a disk was short (monotonic)

    def __post_init__(self) -> None:
        for i, tree in enumerate(self.trees):
            try:
                device = os.stat(tree).st_dev
            except OSError:
                continue
            disk = self.disks.get(device)
            if disk is None:
                size, free = disk_space(tree)
                reserve = reserve_of(size)
                if free < reserve:
                    raise MachineDown(f"the disk holding {tree} has {mb(free)} MB free, less than the {mb(reserve)} MB "
                                      "kept for the host's own records while agent code writes there")
                disk = self.disks[device] = Disk(str(tree), [], reserve, free)
            disk.trees.append(i)
            disk.used_at_open += self.used[i]

    def short(self) -> list[tuple[int, Disk, int]]:
        """The disks short of their reserve now: (device, disk, its free space)."""
        found = []
        for device, disk in self.disks.items():
            try:
                free = disk_space(disk.path)[1]
            except OSError:
                continue
            if free < disk.reserve:
                found.append((device, disk, free))
        return found

    def measure_due(self, short: list[tuple[int, Disk, int]], every_s: float) -> bool:
        """Whether the folders are to be measured now for `short`: once a disk is short, again each time it
        lost another quarter of its floor, and every `every_s` while it stays short."""
        if not short:
            for disk in self.disks.values():
                disk.scanned_free = None
            return False
        return (time.monotonic() - self.scanned_at >= every_s
                or any(d.scanned_free is None or free < d.scanned_free - d.floor // 4 for _, d, free in short))

    def culprit(self, used: list[int], short: list[tuple[int, Disk, int]],
                sharing: Callable[[int], int]) -> tuple[str, Disk] | None:
        """Why the sandbox, whose folders hold `used` now, is stopped for a short disk (and which), or None
        when what it wrote there since it opened is no fair part of what the disk lost (`sharing(device)`:
        the sandboxes open on it)."""
        self.scanned_at = time.monotonic()
        for device, disk, free in short:
            disk.scanned_free = free
            wrote = sum(used[i] for i in disk.trees) - disk.used_at_open
            lost = disk.free_at_open - free
            if wrote >= disk.floor and wrote * 2 * max(1, sharing(device)) >= lost:
                return (f"filling the disk its folders are on: it wrote {mb(wrote)} MB there, leaving {mb(free)} MB "
                        f"free, less than the {mb(disk.reserve)} MB the host keeps for its own records"), disk
        return None

    def make_room(self, disk: Disk, max_entries: int) -> int:
        """Remove the regular files the sandbox changed on `disk` since it opened, largest first, until the
        reserve and a floor more are free again (its processes are dead: nothing writes there any more; the
        floor, so the host's next writes do not make the disk short at once); bytes removed.
        Nothing is followed through a link: each folder is opened by name from its parent's descriptor."""
        since = self.opened - 2.0  # a coarse clock: ctime, which no agent can set back
        found: list[tuple[int, int, tuple[str, ...], str, int]] = []  # (bytes, tree, folder, name, inode)
        for i in disk.trees:
            top = str(self.trees[i])
            try:
                walk = os.fwalk(top, follow_symlinks=False)
                for folder, _, names, folder_fd in walk:
                    rel = () if folder == top else tuple(os.path.relpath(folder, top).split(os.sep))
                    for name in names:
                        try:
                            info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISREG(info.st_mode) and info.st_ctime >= since and info.st_blocks:
                            found.append((info.st_blocks * 512, i, rel, name, info.st_ino))
                        if len(found) >= max_entries:
                            break
                    if len(found) >= max_entries:
                        break
            except OSError:
                continue
        removed = 0
        for size, i, rel, name, inode in sorted(found, key=lambda f: -f[0]):
            try:
                if disk_space(disk.path)[1] >= disk.reserve + disk.floor:
                    break
            except OSError:
                break
            if _unlink_at(self.trees[i], rel, name, inode):
                removed += size
        return removed


def _unlink_at(top: Path, folder: tuple[str, ...], name: str, inode: int) -> bool:
    """Remove `top/folder.../name` if it is still the regular file `inode`, never through a link."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(top, flags)
    except OSError:
        return False
    try:
        for part in folder:
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if info.st_ino != inode or not stat.S_ISREG(info.st_mode):
            return False
        os.unlink(name, dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


MAX_ENTRIES = 100_000  # files and folders a sandbox may make there

def disk_over(trees: list[Path], limit: int) -> str | None:
    """Why `trees` hold too much (bytes on disk, or entries), or None. Links are not followed."""
    return disk_use(trees, limit)[0]


def disk_use(trees: list[Path], limit: int | None = None) -> tuple[str | None, list[int]]:
    """(why `trees` hold too much, bytes on disk or entries past `limit` or MAX_ENTRIES, else None; the bytes
    on disk under each tree, as far as counted). Links are not followed."""
    used, entries, total = [0] * len(trees), 0, 0
    for i, tree in enumerate(trees):
        stack = [str(tree)]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        entries += 1
                        if entries > MAX_ENTRIES:  # counted no further
                            return (f"making more than {MAX_ENTRIES} files in its folders" if limit is not None
                                    else None), used
                        info = entry.stat(follow_symlinks=False)
                        used[i] += info.st_blocks * 512
                        total += info.st_blocks * 512
                        if limit is not None and total > limit:
                            return f"writing more than {limit // 2**20} MB to its folders", used
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
            except OSError:
                continue  # removed while we looked
    return None, used
