"""The `bwrap` backend: bubblewrap namespaces, no daemon.

Each command gets fresh namespaces (user, mount, pid, net, ipc, uts, cgroup) in which
only the paths the interpreter needs exist, read-only, plus the workspace read-write
and a private /tmp. Inside it runs as uid 65534 with no capabilities and cannot
create user namespaces of its own; `--die-with-parent` ties it to our process, and
`--unshare-net` leaves it only a loopback, where the relay exposes the gateway.

Limits: rlimits (CPU seconds, address space, file size, processes) are set on bwrap
before exec and inherited. RLIMIT_NPROC does not bind a process whose host uid is 0,
so when we run as root a pids cgroup per sandbox caps processes instead.
"""

from __future__ import annotations

import os
import resource
import shutil
import uuid
from functools import lru_cache
from pathlib import Path

from services.sandbox.base import (
    WORKSPACE,
    Sandbox,
    hidden_core_paths,
    python_paths,
)
from services.sandbox.processes import GroupPopen

SANDBOX_UID = 65534  # nobody
CGROUP_PREFIX = "hyperagents-"  # then the pid of the process that made it
# Host paths a dynamically linked Python needs; nothing else of the host is visible.
SYSTEM_PATHS = ("/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/ssl", "/etc/passwd", "/etc/group",
                "/etc/hosts", "/etc/localtime")


class PidsCgroup:
    """A pids cgroup for one sandbox (root only); None-safe when cgroups are not writable."""

    def __init__(self, limit: int) -> None:
        self.path: Path | None = None
        root = _pids_cgroup_root() if os.geteuid() == 0 else None
        if root is None:
            return
        remove_dead_cgroups(root)
        path = root / f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
            self.path = path
        except OSError:
            self.remove_dir(path)

    def enter(self) -> None:
        """Move the calling process (a child before exec) into the cgroup."""
        if self.path:
            (self.path / "cgroup.procs").write_text("0")

    def remove(self) -> None:
        if self.path:
            self.remove_dir(self.path)

    @staticmethod
    def remove_dir(path: Path) -> None:
        try:
            path.rmdir()
        except OSError:
            pass  # absent, or a process still dying: the kernel frees it once empty


def remove_dead_cgroups(root: Path) -> None:
    """Remove the pids cgroups that processes which died without cleaning up (a SIGKILLed run)
    left behind: those named after a process that is gone. The kernel refuses to remove one
    that still holds a process."""
    for path in root.glob(f"{CGROUP_PREFIX}*"):
        owner = path.name[len(CGROUP_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or Path(f"/proc/{owner}").exists():
            continue
        PidsCgroup.remove_dir(path)


def _pids_cgroup_root() -> Path | None:
    """Where pids cgroups can be made: cgroup v1's pids hierarchy, or v2 with pids enabled."""
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        return v1
    v2 = Path("/sys/fs/cgroup")
    try:
        if "pids" in (v2 / "cgroup.subtree_control").read_text().split():
            return v2
    except OSError:
        pass
    return None


class BwrapSandbox(Sandbox):
    name = "bwrap"

    def open(self) -> BwrapSandbox:
        self._cgroup = PidsCgroup(self.config.pids)
        return self

    def close(self) -> None:
        super().close()
        if getattr(self, "_cgroup", None):
            self._cgroup.remove()

    def _argv(self, argv: list[str], env: dict[str, str], cwd: str) -> list[str]:
        cmd = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
               "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL",
               "--die-with-parent", "--new-session", "--clearenv"]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        for path in SYSTEM_PATHS:
            cmd += ["--ro-bind-try", path, path]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                cmd += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        # The private /tmp comes before the interpreter: a Python installed under /tmp (a
        # virtualenv made there) is then bound on top of it instead of hidden by it.
        cmd += ["--dev", "/dev", "--proc", "/proc", "--size", str(self.config.tmp_mb * 2**20), "--tmpfs", "/tmp"]
        for path in python_paths():
            cmd += ["--ro-bind", path, path]
        for path in _hidden():
            cmd += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
        cmd += ["--bind", str(self.workspace), WORKSPACE]
        for m in self.all_mounts():
            cmd += ["--bind" if m.writable else "--ro-bind", str(m.source), m.target]
        # The sandbox's own root (where mount points were made) becomes read-only: it is a
        # tmpfs without a size limit, so writes there would only eat host memory.
        return cmd + ["--remount-ro", "/", "--chdir", cwd, "--", *argv]

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> GroupPopen:
        limits = self.config
        cgroup = self._cgroup

        def limit_child() -> None:  # runs in the forked child, before bwrap starts
            cgroup.enter()
            for kind, value in ((resource.RLIMIT_CPU, limits.cpu_seconds),
                                (resource.RLIMIT_AS, limits.memory_mb * 2**20),
                                (resource.RLIMIT_FSIZE, limits.file_size_mb * 2**20),
                                (resource.RLIMIT_NPROC, limits.pids),
                                (resource.RLIMIT_CORE, 0)):
                resource.setrlimit(kind, (value, value))

        return GroupPopen(self._argv(argv, env, cwd), env={}, preexec_fn=limit_child)


@lru_cache(maxsize=1)
def _hidden() -> tuple[str, ...]:
    return tuple(hidden_core_paths())


@lru_cache(maxsize=1)
def bwrap_unavailable() -> str | None:
    """None when a one-shot sandboxed `python -c` works here, else a one-line reason."""
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bwrap-selftest-") as tmp:
        with BwrapSandbox(Path(tmp)) as box:
            result = box.run([box.python, "-c", "print('sandbox ok')"], {"PATH": "/usr/bin:/bin"}, timeout=30)
    if result.ok and result.stdout.strip() == "sandbox ok":
        return None
    detail = (result.stderr.strip().splitlines() or [result.why()])[-1]
    return f"bubblewrap cannot start a sandbox here: {detail}"
