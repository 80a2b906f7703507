"""A Ray worker node's end of a remote sandbox: an actor that keeps one local sandbox.

`SandboxHost` runs in a Ray worker process on the node the scheduler chose. It opens a
sandbox of that node's own backend (bwrap or docker; `auto` is resolved there, `none`
refused) on a temporary workspace. Read-only mounts arrive as file maps and are written
into temporary folders; writable mounts are temporary folders too, sent back with the
workspace by `pull`. Commands start through it; their pipes are read on threads into
bounded buffers that the controller drains with `read`, as a pipe would be read.

When the sandbox talks to the gateway, its relay connects to a Unix socket served here by
the gateway's own listener code (services/gateway/server.py: sizes bounded, routes checked)
on a `Door`: each request's session key and JSON body go to the run's Mailbox
(services/sandbox/ray_channel.py), the controller answers it with its gateway, and the reply
comes back. No provider key is ever here, and no port is opened: Ray carries it.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import io
import itertools
import shutil
import socket
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING

from services.config import GatewayConfig, SandboxConfig
from services.errors import UserError
from services.gateway.params import Refusal
from services.gateway.server import Listeners, Reply, error_reply
from services.sandbox.backends import choose_local_backend, open_local
from services.sandbox.base import INSIDE, Mount, Process, Sandbox, SandboxClosed
from services.sandbox.ray_files import less, place, read_tree, replace_tree
from services.workspace import Quota

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from services.sandbox.ray_channel import Mailbox

BUFFER_CHARS = 4 * 2**20  # of a command's stdout or stderr held here before its pipe waits for the controller


class Stream:
    """One pipe of a command, read on a thread into a buffer of at most BUFFER_CHARS characters."""

    def __init__(self, pipe: IO[str]) -> None:
        # What every local backend's pipe is (Popen's text mode, DockerProcess): text over a buffered reader,
        # whose read1 takes what is there.
        assert isinstance(pipe, io.TextIOWrapper) and isinstance(pipe.buffer, io.BufferedReader), type(pipe)
        self._parts: deque[str] = deque()
        self._size = 0
        self._eof = False
        self._stopped = False
        self._cond = threading.Condition()
        threading.Thread(target=self._pump, args=(pipe.buffer,), daemon=True).start()

    def _pump(self, pipe: io.BufferedReader) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := pipe.read1(65536):  # what is there, not a full 64 KiB
                self._put(decoder.decode(chunk))
        except (OSError, ValueError):
            pass  # closed under us
        finally:
            self._put(decoder.decode(b"", final=True))
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _put(self, text: str) -> None:
        if not text:
            return
        with self._cond:
            self._cond.wait_for(lambda: self._size < BUFFER_CHARS or self._stopped)
            if self._stopped:
                return
            self._parts.append(text)
            self._size += len(text)
            self._cond.notify_all()

    def read(self, max_chars: int, timeout: float) -> str | None:
        """Up to `max_chars` characters once there are any; "" at the end; None if none came in `timeout`."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._size or self._eof, timeout):
                return None
            taken, size = [], 0
            while self._parts and size < max_chars:
                part = self._parts.popleft()
                if size + len(part) > max_chars:
                    self._parts.appendleft(part[max_chars - size:])
                    part = part[:max_chars - size]
                taken.append(part)
                size += len(part)
            self._size -= size
            self._cond.notify_all()
            return "".join(taken)

    def stop(self) -> None:
        """Nobody reads any more: let the pump drop what comes."""
        with self._cond:
            self._stopped = True
            self._parts.clear()
            self._size = 0
            self._cond.notify_all()


class Door:
    """What the gateway's listener code asks of a gateway, answered by the run's gateway on the
    controller through the Mailbox: only the caller's key and the request body travel."""

    def __init__(self, mailbox: ActorHandle[Mailbox], max_request_mb: int, timeout: float) -> None:
        self.mailbox = mailbox
        self.timeout = timeout
        self.gw = GatewayConfig(max_request_mb=max_request_mb)  # what the listener reads of a gateway's config

    def handle(self, protocol: str, api_key: str, body: dict) -> Reply:
        return self._ask(protocol, api_key, body)

    def refuse(self, api_key: str, status: int, message: str, kind: str, requested: object = None) -> Reply:
        """A request refused before it could go on (too large, not JSON): answered here, not booked."""
        return error_reply(status, message, kind)

    def models_for(self, api_key: str) -> list[str]:
        """The caller's models, as the run's gateway lists them for its key; its refusal as a Refusal."""
        reply = self._ask("models", api_key, None)
        data = reply.body.get("data") if reply.status == 200 else None
        if not isinstance(data, list):
            error = reply.body.get("error")
            error = error if isinstance(error, dict) else {}
            raise Refusal(reply.status if reply.status != 200 else 502,
                          str(error.get("message", "no model list"))[:300],
                          str(error.get("type", "bad_gateway"))[:50])
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def _ask(self, kind: str, api_key: str, body: dict | None) -> Reply:
        import ray
        import ray.exceptions

        try:
            status, answer, headers = ray.get(self.mailbox.ask.remote(kind, api_key, body), timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            return error_reply(504, "the run's gateway did not answer in time", "timeout")
        except ray.exceptions.RayError:
            return error_reply(503, "the run's gateway cannot be reached from this node", "service_unavailable")
        return Reply(status, answer, headers)


@dataclasses.dataclass
class _Command:
    proc: Process
    out: Stream
    err: Stream


class SandboxHost:
    """One sandbox on this node, for the controller's RaySandbox (made a Ray actor there)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = dataclasses.replace(config, executor="local")  # this node's own backend
        self.box: Sandbox | None = None
        self.root: Path | None = None
        self.writable: dict[str, Path] = {}  # mount target -> its folder here
        self.listeners: Listeners | None = None
        self._commands: dict[int, _Command] = {}
        self._ids = itertools.count(1)

    def open(self, workspace: dict, mounts: list, door: tuple | None) -> dict:
        """Open the sandbox: `workspace` its files, `mounts` (target, writable, file map) each, `door`
        (mailbox, max_request_mb, timeout) when it reaches the gateway. What the controller needs
        to know of it: its interpreter, backend and node."""
        import ray
        import ray.exceptions

        if self.config.backend == "none":
            raise UserError("sandbox.backend none cannot run on a Ray node")
        backend, _ = choose_local_backend(self.config)
        self.root = Path(tempfile.mkdtemp(prefix="hyperagents-ray-"))
        self.root.chmod(0o755)  # a docker sandbox's user must reach the folders below
        place(self.root / "workspace", workspace)
        local_mounts = []
        for i, (target, writable, files) in enumerate(mounts):
            path = self.root / f"mount-{i}"
            place(path, files)
            local_mounts.append(Mount(path, target, writable))
            if writable:
                self.writable[target] = path
        socket_path = None
        if door is not None:
            self.listeners = Listeners(Door(*door), None)
            socket_path = self.listeners.unix_socket
        self.box = open_local(self.config, self.root / "workspace", local_mounts, socket_path, backend)
        self.box.__enter__()
        return {"python": self.box.python, "backend": backend, "node_id": ray.get_runtime_context().get_node_id(),
                "host": socket.gethostname(), "trusted": trusted_digest()}

    def _open_box(self) -> Sandbox:
        if self.box is None:
            raise SandboxClosed("the sandbox is closed")
        return self.box

    def popen(self, argv: list[str], env: dict[str, str], cwd: str | None) -> tuple[int, int]:
        """Start a command; its id here and its pid on this node."""
        proc = self._open_box().popen(argv, env, cwd)
        ident = next(self._ids)
        self._commands[ident] = _Command(proc, Stream(proc.stdout), Stream(proc.stderr))
        return ident, proc.pid

    def write(self, ident: int, text: str) -> bool:
        """Write to the command's stdin; False when it no longer reads (its stdin is closed)."""
        try:
            stdin = self._commands[ident].proc.stdin
            stdin.write(text)
            stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def close_stdin(self, ident: int) -> None:
        try:
            self._commands[ident].proc.stdin.close()
        except (OSError, ValueError):
            pass

    def read(self, ident: int, stream: str, max_chars: int, timeout: float) -> str | None:
        command = self._commands[ident]
        return (command.out if stream == "stdout" else command.err).read(max_chars, timeout)

    def poll(self, ident: int) -> int | None:
        return self._commands[ident].proc.poll()

    def kill(self, ident: int) -> None:
        proc = self._commands[ident].proc
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass

    def wait(self, ident: int, timeout: float) -> int | None:
        """The exit code, or None when the command still runs after `timeout` seconds."""
        import subprocess

        try:
            return self._commands[ident].proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def run(self, argv: list[str], env: dict[str, str], timeout: float, input: str | None, cwd: str | None,
            output_cap: int | None) -> dict:
        """Run to completion here (Sandbox.run); the RunResult's fields."""
        return dataclasses.asdict(self._open_box().run(argv, env, timeout, input, cwd, output_cap))

    def disk_capped(self) -> str | None:
        return self._open_box().disk_capped

    def push(self, target: str | None, files: dict) -> list[str]:
        """Make the workspace (target None) or a writable mount hold exactly `files`."""
        box = self._open_box()
        assert self.root is not None  # _open_box: opened
        tree = self.root / "workspace" if target is None else self.writable[target]
        skipped = replace_tree(tree, files)
        box.adopt(tree)
        return skipped

    def pull(self, quota: tuple, only: tuple[str, ...] | None) -> dict:
        """The workspace's regular files (only the top-level names `only`, if given) and the writable
        mounts', all within one quota; what was left out of the workspace and why."""
        left = Quota(*quota)
        assert self.root is not None, "the sandbox host is not open"
        workspace, dropped = read_tree(self.root / "workspace", left, only)
        left = less(left, workspace)
        mounts = {}
        for target, path in self.writable.items():
            mounts[target], _ = read_tree(path, left)
            left = less(left, mounts[target])
        return {"workspace": workspace, "dropped": dropped, "mounts": mounts}

    def close(self) -> None:
        """Kill everything inside, stop the door, remove the folders."""
        try:
            if self.box is not None:
                self.box.close()
        finally:
            for command in self._commands.values():
                command.out.stop()
                command.err.stop()
            if self.listeners is not None:
                self.listeners.close()
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self.box = self.listeners = None



def trusted_digest() -> str:
    """A hash of the trusted scripts of inside/ that sandboxes here run: a node whose differ from
    the controller's runs another version of this project."""
    digest = hashlib.sha256()
    for path in sorted(INSIDE.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
