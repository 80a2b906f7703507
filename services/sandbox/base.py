"""What every sandbox backend offers: start commands on a workspace, run one to completion.

A sandbox is opened on a host directory (the workspace), which agent code sees
read-write at `WORKSPACE` (the `none` backend: at its own path). Extra host paths
come in as `Mount`s. When the sandbox is given the gateway's Unix socket, every
command starts under the trusted relay (`inside/relay.py`), so code inside reaches the
gateway at `gateway_url` on its own loopback and nothing else outside.

Backends implement `_spawn` (a Popen-like process for an argv and environment) and
may override `open`/`close`; `popen` and `run` (timeout, output cap, kill) are shared.
"""

from __future__ import annotations

import os
import signal
import site
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import inside
from services.config import SandboxConfig
from services.sandbox import disk_room
from services.sandbox.disk_room import DiskRoom, disk_use
from services.sandbox.processes import Process, kill_tree, wait_capped

WORKSPACE = "/workspace"  # where the workspace appears inside an isolating sandbox
TRUSTED_DIR = "/opt/hyperagents"  # where the trusted scripts of inside/ appear, read-only
GATEWAY_DIR = "/run/gateway"  # the gateway's socket folder inside
RELAY_PORT = 18080  # the relay's port on the sandbox's own loopback
INSIDE = Path(inside.__file__).resolve().parent  # the trusted scripts' folder on the host
DISK_CHECK_S = 1.0  # how often the folders a sandbox may write are measured
FREE_CHECK_S = 0.05  # how often the free space of the disks under them is asked (services/sandbox/disk_room.py)
_OPEN: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> every sandbox entered, not yet closed


def python_paths() -> list[str]:
    """Directories of the running interpreter and its packages, outside /usr."""
    paths = {sys.base_prefix, sys.prefix, *site.getsitepackages()}
    paths = sorted(p for p in paths if os.path.isdir(p) and not p.startswith("/usr/"))
    return [p for p in paths if not any(p != q and p.startswith(q + "/") for q in paths)]


# The trusted core's own packages and scripts; where the project is installed (not editable)
# they sit in site-packages, which sandboxes see, with the data sets and their labels.
CORE_MODULES = ("services", "domains", "optimizer", "archive", "run_optimization", "setup_proofgrader_repo")


def hidden_core_paths() -> list[str]:
    """Installed copies of the trusted core that lie inside the interpreter's paths: each
    sandbox covers them with an empty folder (or file), so no label is in reach."""
    import importlib.util

    bound = python_paths()
    hidden = []
    for name in CORE_MODULES:
        try:
            spec = importlib.util.find_spec(name)  # finds, never imports
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin:
            continue
        path = str(Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin))
        if any(path == b or path.startswith(b + "/") for b in bound):
            hidden.append(path)
    return hidden


@dataclass(frozen=True)
class Mount:
    source: Path  # host path (file or directory)
    target: str  # absolute path inside the sandbox
    writable: bool = False


@dataclass
class RunResult:
    returncode: int | None  # None when the command was killed by us
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    output_capped: bool = False  # printed more than the cap; killed and cut
    disk_capped: str | None = None  # why the sandbox was killed for what it wrote to its folders

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_capped and not self.disk_capped

    def why(self) -> str:
        """One line on how the command ended, for records and error messages."""
        if self.timed_out:
            return f"killed after the {self.seconds:.0f} s wall-clock limit"
        if self.output_capped:
            return "killed for printing more than the output cap"
        if self.disk_capped:
            return f"killed for {self.disk_capped}"
        if self.returncode and self.returncode < 0:
            return f"killed by signal {signal.Signals(-self.returncode).name}"
        return f"exit code {self.returncode}"


class SandboxClosed(RuntimeError):
    """The host closed the sandbox while a command ran or before it started (Ctrl-C, a cancel):
    what the command did is no result of the agent's, so nothing is recorded from it."""


class SandboxLost(SandboxClosed):
    """The machine the sandbox ran on is gone (a Ray worker node lost): what ran there is no
    result either, and the loop runs the generation again elsewhere."""


@dataclass
class Sandbox:
    """One workspace, isolated by a backend. Use as a context manager; `close` always runs."""

    workspace: Path
    config: SandboxConfig = field(default_factory=SandboxConfig)
    mounts: list[Mount] = field(default_factory=list)
    gateway_socket: Path | None = None  # the gateway's Unix socket on the host
    name = "base"
    isolated = True  # False only for `none`: paths are host paths, no relay
    relay_per_command = True  # False where one relay serves the whole sandbox (docker)
    measures_disk = True  # False where the folders here are copies the host writes (ray: the node's sandbox measures)

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace).resolve()
        self.mounts = [Mount(Path(m.source).resolve(), m.target, m.writable) for m in self.mounts]
        self._procs: list[Process] = []
        self._closed = False
        self.disk_capped: str | None = None  # set when the watch below killed everything inside
        self.lost = False  # the machine it ran on is gone (a remote backend sets it): nothing inside ran to an end
        self._stop_watch = threading.Event()
        self._room: DiskRoom | None = None  # the disks under its writable folders, once open
        self._disk_lock = threading.Lock()

    # -- lifecycle: backends extend these ---------------------------------------------------
    def open(self) -> Sandbox:
        return self

    def close(self) -> None:
        """Kill every process still running; idempotent. A disk under its folders that its writes left short
        of the host's reserve is still found then, and given the reserve back (a host write that met the full
        disk first stopped the run as this machine's failure: a resume finds the room, not the agent's files)."""
        if self._closed:
            return
        self._closed = True
        _OPEN.pop(id(self), None)
        self._stop_watch.set()
        for proc in self._procs:
            kill_tree(proc)
        self._check_disk(settle=True)

    def __enter__(self) -> Sandbox:
        try:
            self.open()
            if self.measures_disk:  # MachineDown when a disk under its folders is short of the host's reserve
                trees = [self.workspace, *(m.source for m in self.mounts if m.writable)]
                self._room = DiskRoom(trees, disk_use(trees)[1])
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._watch_disk, name=f"sandbox-disk-{self.workspace.name}", daemon=True).start()
        _OPEN[id(self)] = self
        return self

    def _watch_disk(self) -> None:
        """Kill everything inside once the folders it may write hold more than `config.disk_mb`
        (or disk_room.MAX_ENTRIES files), or once it filled a disk under them into the host's reserve
        (services/sandbox/disk_room.py): the file size limit bounds one file, this bounds them all.
        Once stopped, whatever starts there is killed too."""
        measured = time.monotonic()
        while not self._stop_watch.wait(FREE_CHECK_S):
            due = time.monotonic() - measured >= DISK_CHECK_S
            if due:
                measured = time.monotonic()
            if not self.disk_capped:
                self._check_disk(measure=due)
            elif due:
                for proc in list(self._procs):
                    kill_tree(proc)

    def _check_disk(self, measure: bool = False, settle: bool = False) -> None:
        """Measure the folders if `measure`, or if a disk under them is short of the host's reserve (a statvfs
        each, otherwise); past a cap, kill everything inside (`disk_capped` says why) and give a short disk
        its reserve back from what the sandbox wrote there. Called by the watch, and where the host is
        about to keep what agent code did (`run`, `check_stopped`, the gateway asking `closed`), so a
        disk filled between two rounds of the watch is found before the host's own write meets it;
        `settle` (at close): measured whenever a disk is short."""
        room = self._room
        if room is None:
            return
        with self._disk_lock:  # held while room is made: whoever asks next finds it made
            if self.disk_capped:
                return
            short = room.short()
            if not (measure or (settle and short) or room.measure_due(short, DISK_CHECK_S)):
                return
            over, used = disk_use(room.trees, int(self.config.disk_mb * 2**20))
            if over and short:  # counted in full: what it wrote on each disk
                used = disk_use(room.trees)[1]
            found = room.culprit(used, short, _sharing) if short else None
            if over:
                self.disk_capped = over
            elif found is not None:
                self.disk_capped = found[0]
            else:
                return
            for proc in list(self._procs):
                kill_tree(proc)
            if found is not None:
                room.make_room(found[1], disk_room.MAX_ENTRIES)

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Closed by the host, or stopped for good for what it wrote: the gateway asks before each call of
        a session opened for it, and refuses the call then (a call whose answer would be booked on a disk
        its agent filled is where the host writes first)."""
        if not self._closed:
            self._check_disk()
        return self._closed or self.disk_capped is not None

    def check_stopped(self, what: str) -> None:
        """Raise SandboxLost or SandboxClosed if `what` (a process inside) ended because the host closed
        the sandbox or its machine was lost: no result of the agent's, never recorded as one."""
        if self.lost:
            raise SandboxLost(f"{what}: the machine of its sandbox is gone")
        if self._closed:
            raise SandboxClosed(f"{what}: its sandbox was closed")
        self._check_disk()  # the harness asks before it keeps each row: a disk its agent filled is found first

    def adopt(self, tree: Path) -> None:
        """Files the host put into the writable `tree` after open: let commands inside write them.

        Nothing to do where the sandbox's user maps to ours (bwrap, none)."""

    # -- paths and addresses ----------------------------------------------------------------
    @property
    def workdir(self) -> str:
        """The workspace as code inside sees it."""
        return WORKSPACE if self.isolated else str(self.workspace)

    @property
    def python(self) -> str:
        """The interpreter to run inside (the host's, bound read-only, unless a backend says otherwise)."""
        return sys.executable

    @property
    def gateway_url(self) -> str | None:
        """Base URL of the gateway as code inside reaches it (isolated backends: through the relay)."""
        return f"http://127.0.0.1:{RELAY_PORT}/v1" if self.isolated and self.gateway_socket else None

    def base_env(self) -> dict[str, str]:
        """PATH, HOME and locale for commands inside; callers add their own variables."""
        if not self.isolated:
            return {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
        return {"PATH": f"{Path(self.python).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
                "LANG": "C.UTF-8", "TMPDIR": "/tmp"}

    def inside(self, host_path: str | Path) -> str:
        """Where a host path under the workspace or a mount appears inside the sandbox."""
        path = Path(host_path).resolve()
        if not self.isolated:
            return str(path)
        for source, target in [(self.workspace, WORKSPACE), *((m.source, m.target) for m in self.mounts)]:
            if path == source or source in path.parents:
                return str(Path(target) / path.relative_to(source))
        raise ValueError(f"{path} is not visible inside the sandbox")

    def trusted_script(self, name: str) -> str:
        """A script of inside/ as code inside reaches it."""
        return f"{TRUSTED_DIR}/{name}" if self.isolated else str(INSIDE / name)

    def all_mounts(self) -> list[Mount]:
        """The caller's mounts plus the trusted scripts (inside/) and the gateway socket folder."""
        extra = [Mount(INSIDE, TRUSTED_DIR)]
        if self.gateway_socket:  # read-only: code inside connects to the socket, never removes or replaces it
            extra.append(Mount(self.gateway_socket.parent, GATEWAY_DIR))
        return [*self.mounts, *extra]

    # -- commands ---------------------------------------------------------------------------
    def popen(self, argv: list[str], env: dict[str, str], cwd: str | None = None) -> Process:
        """Start `argv` inside with exactly `env`; a Popen-like object with text pipes
        stdin, stdout and stderr (`poll`, `wait`, `kill`, `pid`)."""
        if self._closed:
            raise SandboxClosed("the sandbox is closed")
        if self.isolated and self.gateway_socket and self.relay_per_command:
            socket_inside = f"{GATEWAY_DIR}/{self.gateway_socket.name}"
            argv = [self.python, f"{TRUSTED_DIR}/relay.py", "--socket", socket_inside,
                    "--port", str(RELAY_PORT), "--", *argv]
        proc = self._spawn(list(argv), dict(env), cwd or self.workdir)
        self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        return proc

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> Process:
        raise NotImplementedError

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 60.0,
            input: str | None = None, cwd: str | None = None, output_cap: int | None = None) -> RunResult:
        """Run to completion with a wall-clock limit and an output cap; never raises for
        what the command does."""
        cap = int(output_cap if output_cap is not None else self.config.output_cap_mb * 2**20)
        started = time.monotonic()
        code, out, err, timed_out, over = wait_capped(self.popen(argv, env or {}, cwd), input, started + timeout, cap)
        if self._closed:
            raise SandboxClosed(f"the sandbox was closed while {Path(argv[0]).name} ran")
        self._check_disk()  # what it wrote in its last moments, before the caller keeps its result
        capped = self.disk_capped
        return RunResult(None if (timed_out or over or capped) else code, out, err, time.monotonic() - started,
                         timed_out, over, capped)


def _sharing(device: int) -> int:
    """The sandboxes of this process open with writable folders on `device`."""
    return sum(1 for box in list(_OPEN.values()) if box._room is not None and device in box._room.disks)


def close_all() -> int:
    """Close every sandbox still open in this process (Ctrl-C with generations in flight on other
    threads: what runs inside is killed, so those threads end at once); how many there were."""
    boxes = list(_OPEN.values())
    for box in boxes:
        box.close()
    return len(boxes)
