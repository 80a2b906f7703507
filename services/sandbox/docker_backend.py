"""The docker backend: one container per sandbox, every command a `docker exec` in it.

The container has no network (only `lo`), no capabilities, a read-only root, private
tmpfs /tmp and HOME, and memory, pids, CPU, file-size and CPU-time limits. Everything
runs as a non-root user (nobody when we are root, else our own uid). The container's
main process is the trusted relay when the sandbox has a gateway socket (the gateway
makes its socket connectable by anyone), so one relay serves every command. Docker's
init (tini) is PID 1 so that orphans are reaped: a zombie keeps its pid, and enough of
them would fill the pids limit.

The engine must run on this machine: `kill` signals a command's process group by its
host pid (it works even when a fork bomb leaves no pid for a `docker exec kill`), and
the relay's readiness is read from the container's /proc/PID/net/tcp.
"""

from __future__ import annotations

import errno
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path
from urllib.parse import urlparse

import docker
import requests
from docker.transport import UnixHTTPAdapter
from docker.types import Mount as DockerMount
from docker.types import Ulimit

from services.config import SandboxConfig
from services.errors import UserError
from services.sandbox.base import (
    GATEWAY_DIR,
    RELAY_PORT,
    TRUSTED_DIR,
    WORKSPACE,
    Sandbox,
    hidden_core_paths,
    python_paths,
)
from services.sandbox.image import PYTHON_LABEL

LABEL = "hyperagents.sandbox"  # on every container we create, to find leftovers
SANDBOX_UID = 65534  # nobody: who runs agent code when we are root
HOST_PATHS = ("/usr", "/etc/ssl", "/etc/alternatives", "/etc/ld.so.cache")  # what the host's Python needs
KILLED = 128 + signal.SIGKILL  # docker's exit code for a process it lost with its container


def connect(config: SandboxConfig, timeout: float = 60) -> docker.DockerClient:
    """A client of the configured engine that has answered a ping, or a UserError."""
    where = config.docker_host or os.environ.get("DOCKER_HOST") or "the default socket"
    try:
        if config.docker_host:
            client = docker.DockerClient(base_url=config.docker_host, timeout=timeout)
        else:
            client = docker.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, requests.RequestException, OSError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"no Docker engine answers at {where}: {reason[:200]}") from None
    return client


def engine_available(config: SandboxConfig) -> str | None:
    """None when a Docker engine answers within about 2 s, else why not (one line)."""
    try:
        connect(config, timeout=2).close()
    except UserError as e:
        return str(e)
    return None


class DockerSandbox(Sandbox):
    name = "docker"
    relay_per_command = False  # the container's main process is the relay for all its commands

    def __post_init__(self):
        super().__post_init__()
        self._client: docker.DockerClient | None = None
        self._container_name = f"hyperagents-{uuid.uuid4().hex[:16]}"  # to remove it even if create is interrupted
        self._container_id = ""
        self._python = sys.executable
        self._handed_over: list[Path] = []  # trees chowned to the sandbox user, to give back at close
        self._spawned: weakref.WeakSet[DockerProcess] = weakref.WeakSet()  # a streaming one is kept by its thread

    @property
    def python(self) -> str:
        return self._python

    def open(self) -> "DockerSandbox":
        self._client = connect(self.config)
        image = self._image()
        mounts = [_bind(self.workspace, WORKSPACE, writable=True)]
        mounts += [_bind(m.source, m.target, m.writable) for m in self.all_mounts()]
        if image.labels[PYTHON_LABEL] == "host":
            mounts += [_bind(Path(path), path, writable=False) for path in [*HOST_PATHS, *python_paths()]]
            mounts += [DockerMount(path, None, type="tmpfs") if os.path.isdir(path) else
                       _bind(Path(os.devnull), path, writable=False) for path in hidden_core_paths()]
        else:
            self._python = image.labels[PYTHON_LABEL]
        self._hand_over([self.workspace, *(m.source for m in self.mounts if m.writable)])
        if self.gateway_socket:
            command = [self._python, f"{TRUSTED_DIR}/relay.py", "--socket",
                       f"{GATEWAY_DIR}/{self.gateway_socket.name}", "--port", str(RELAY_PORT)]
        else:
            command = ["sleep", "infinity"]
        config = self.config
        container = self._client.containers.run(
            image.id, command, name=self._container_name, detach=True, init=True, user=self._user,
            labels={LABEL: "1"}, network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            read_only=True, working_dir=WORKSPACE, mounts=mounts,
            tmpfs={path: f"size={config.tmp_mb}m,mode=1777,exec" for path in ("/tmp", "/home/sandbox")},
            mem_limit=f"{config.memory_mb}m", memswap_limit=f"{config.memory_mb}m", pids_limit=config.pids,
            nano_cpus=int(config.cpus * 1e9),
            ulimits=[Ulimit(name="fsize", soft=config.file_size_mb * 2**20, hard=config.file_size_mb * 2**20),
                     Ulimit(name="cpu", soft=config.cpu_seconds, hard=config.cpu_seconds)])
        self._container_id = container.id
        container.reload()
        if container.status != "running":
            logs = container.logs(tail=3).decode(errors="replace").strip().replace("\n", " | ")
            raise RuntimeError(f"the sandbox container stopped at once ({command[0]}): {logs or 'no output'}")
        pid = container.attrs["State"]["Pid"]
        if not _in_container(pid, container.id):
            raise UserError("the docker backend needs the Docker engine on this machine "
                            "(it kills commands by their host pid); use sandbox.backend=bwrap")
        if self.gateway_socket:
            _wait_for_listener(pid, RELAY_PORT, container)
        return self

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._tear_down()

    def _tear_down(self) -> None:
        client, self._client = self._client, None
        try:
            if client is not None:
                _remove(client, self._container_name)
        finally:
            for proc in list(self._spawned):
                proc.abandon()
            try:
                self._give_back()
            finally:
                if client is not None:
                    client.close()

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> "DockerProcess":
        # `docker exec` adds PATH, HOSTNAME and HOME to what it is given: `env -i` gives exactly `env`.
        command = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        api = self._client.api
        exec_id = api.exec_create(self._container_id, command, stdin=True, stdout=True, stderr=True,
                                  workdir=cwd, user=self._user)["Id"]
        sock, pending = _start_exec(api, exec_id)
        proc = DockerProcess(api, exec_id, self._container_id, sock, pending, argv)
        self._spawned.add(proc)
        return proc

    @property
    def _user(self) -> str:
        return f"{SANDBOX_UID}:{SANDBOX_UID}" if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"

    def _image(self):
        tag, build = self.config.docker_image, "build it with `python -m services.sandbox build-image`"
        try:
            image = self._client.images.get(tag)
        except docker.errors.ImageNotFound:
            raise UserError(f"docker image {tag} not found: {build}") from None
        if not image.labels.get(PYTHON_LABEL):
            raise UserError(f"docker image {tag} has no {PYTHON_LABEL} label: {build}")
        return image

    def _hand_over(self, trees: list[Path]) -> None:
        """As root, let the sandbox user write the writable trees (commands run as nobody)."""
        if os.geteuid() != 0:
            return
        for tree in trees:
            self._handed_over.append(tree)
            _chown_tree(tree, SANDBOX_UID, SANDBOX_UID)

    def adopt(self, tree: Path) -> None:
        self._hand_over([Path(tree)])

    def _give_back(self) -> None:
        """Everything in the writable trees back to us, including what the sandbox created."""
        while self._handed_over:
            _chown_tree(self._handed_over.pop(), os.getuid(), os.getgid())


class DockerProcess:
    """A command running as a docker exec, with the parts of a text-mode subprocess.Popen
    that sandboxes use: stdin, stdout, stderr, poll, wait, kill, pid, returncode."""

    def __init__(self, api, exec_id: str, container_id: str, sock: socket.socket, pending: bytes, args):
        self.args = args
        self.returncode: int | None = None
        self._api, self._exec_id, self._container_id, self._sock = api, exec_id, container_id, sock
        self._pid: int | None = None
        self._unwanted = threading.Event()  # set by kill and abandon: output nobody reads may be dropped
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        for fd in (out_write, err_write):
            os.set_blocking(fd, False)  # so the demultiplexer can give up on a reader that stopped reading
        self.stdin = io.TextIOWrapper(io.BufferedWriter(_SocketWriter(sock)), encoding="utf-8", errors="replace",
                                      line_buffering=True, write_through=True)
        self.stdout = open(out_read, encoding="utf-8", errors="replace")
        self.stderr = open(err_read, encoding="utf-8", errors="replace")
        self._demux = threading.Thread(target=self._demultiplex, args=(pending, {1: out_write, 2: err_write}),
                                       daemon=True)
        self._demux.start()

    @property
    def pid(self) -> int:
        """The command's host pid (0 if it ended before docker told it)."""
        while self._pid is None:
            self._inspect()
            if self._pid is None and self.returncode is not None:
                return 0
            if self._pid is None:
                time.sleep(0.002)  # docker records it a moment after the stream opens
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self._inspect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            pause = delay if left is None else min(delay, left)
            if self._demux.is_alive():
                self._demux.join(pause)  # the stream ends when the command does: this returns at once then
            else:
                time.sleep(pause)
            delay = min(delay * 2, 0.05)
        return self.returncode

    def abandon(self) -> None:
        """Drop output nobody reads any more, so the demultiplexer never waits on a full pipe forever."""
        self._unwanted.set()

    def kill(self) -> None:
        """SIGKILL the command and its process group (docker makes every exec a session leader)."""
        self._unwanted.set()
        if self.poll() is not None:
            return
        pid = self.pid
        if not pid or not _in_container(pid, self._container_id):
            return  # already gone; the pid may be someone else's by now
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _inspect(self) -> None:
        try:
            info = self._api.exec_inspect(self._exec_id)
        except docker.errors.NotFound:  # its container was removed
            self.returncode = KILLED
            return
        self._pid = self._pid or info.get("Pid") or None
        if not info["Running"] and info.get("ExitCode") is not None:
            self.returncode = info["ExitCode"]

    def _demultiplex(self, pending: bytes, pipes: dict[int, int | None]) -> None:
        """Split docker's stream into the stdout and stderr pipes. Each frame: stream (1 or 2),
        three zero bytes, a 4-byte big-endian length, then that many bytes."""
        buffer = bytearray(pending)
        try:
            while True:
                while len(buffer) >= 8:
                    size = int.from_bytes(buffer[4:8], "big")
                    if len(buffer) < 8 + size:
                        break
                    fd = pipes.get(buffer[0])
                    if fd is not None and not self._write(fd, bytes(buffer[8:8 + size])):
                        os.close(fd)
                        pipes[buffer[0]] = None
                    del buffer[:8 + size]
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
        except OSError:
            pass
        finally:
            for fd in pipes.values():
                if fd is not None:
                    os.close(fd)
            self._sock.close()

    def _write(self, fd: int, data: bytes) -> bool:
        """Write all of `data`; False when nobody will read it (reader gone, or full pipe after kill)."""
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:
                    if self._unwanted.is_set():
                        return False
                    select.select([], [fd], [], 0.1)
        except BrokenPipeError:
            return False
        return True


class _SocketWriter(io.RawIOBase):
    """The command's stdin: writes go to the exec's stream; close sends EOF."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        try:
            return self._sock.send(data)
        except OSError as e:
            raise BrokenPipeError(errno.EPIPE, "the command's stdin is closed") from e

    def close(self) -> None:
        if not self.closed:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        super().close()


def _start_exec(api, exec_id: str) -> tuple[socket.socket, bytes]:
    """Start an exec on a connection of our own, upgraded to docker's raw stream; the socket
    and the stream bytes that came with the response head (docker-py's socket mode would
    leave those in its own buffer)."""
    adapter = api.get_adapter(api.base_url)
    if isinstance(adapter, UnixHTTPAdapter):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)  # for the handshake; the stream itself may idle for hours
        try:
            sock.connect(adapter.socket_path)
        except OSError:
            sock.close()
            raise
    elif api.base_url.startswith("http://"):
        url = urlparse(api.base_url)
        sock = socket.create_connection((url.hostname, url.port or 2375), timeout=30)
    else:
        raise UserError(f"the docker backend reaches an engine over a Unix socket or plain TCP, not {api.base_url}")
    try:
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        sock.sendall(f"POST /v{api.api_version}/exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n".encode() + body)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("the engine closed the connection")
            head += chunk
        head, _, pending = head.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if status.split()[1:2] not in (["101"], ["200"]):
            raise RuntimeError(f"docker exec did not start: {status}: {pending.decode(errors='replace').strip()}")
        sock.settimeout(None)
        return sock, pending
    except BaseException:
        sock.close()
        raise


def _bind(source: Path, target: str, writable: bool) -> DockerMount:
    return DockerMount(target, str(source), type="bind", read_only=not writable)


def _in_container(pid: int, container_id: str) -> bool:
    """Whether host pid `pid` is a process of the container (its cgroup path names it)."""
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _wait_for_listener(pid: int, port: int, container, timeout: float = 10.0) -> None:
    """Wait until something listens on 127.0.0.1:port in the network namespace of `pid`."""
    wanted = f"0100007F:{port:04X}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
        except OSError:
            lines = []
        if any(line.split()[1] == wanted and line.split()[3] == "0A" for line in lines):  # 0A: LISTEN
            return
        container.reload()
        if container.status != "running":
            break
        time.sleep(0.01)
    logs = container.logs(tail=3).decode(errors="replace").strip().replace("\n", " | ")
    raise RuntimeError(f"the sandbox's relay did not start listening on port {port}: {logs or 'no output'}")


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """chown a tree without following symbolic links (the sandbox may have planted some)."""
    paths = [str(root)]
    if root.is_dir() and not root.is_symlink():
        for folder, dirs, files in os.walk(root):
            paths += [os.path.join(folder, name) for name in (*dirs, *files)]
    for path in paths:
        try:
            os.lchown(path, uid, gid)
        except FileNotFoundError:
            pass


def _remove(client: docker.DockerClient, name: str) -> None:
    """Force-remove a container; an interrupt (Ctrl-C, SIGTERM) during the call is held until it is done."""
    interrupted = None
    while True:
        try:
            client.api.remove_container(name, force=True)
        except docker.errors.NotFound:
            pass
        except Exception:
            raise
        except BaseException as e:
            if interrupted is not None:
                raise
            interrupted = e
            continue
        break
    if interrupted is not None:
        raise interrupted
