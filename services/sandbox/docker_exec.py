"""A command in a docker sandbox: a `docker exec` on a raw stream of our own, with the
parts of subprocess.Popen that sandboxes use.

The engine must run on this machine: `kill` signals a command's process group by its
host pid, which works even when a fork bomb leaves no pid for a `docker exec kill`.
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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import docker
import docker.errors
import requests
from docker.transport import UnixHTTPAdapter

from services.errors import MachineDown, UserError

if TYPE_CHECKING:
    from typing_extensions import Buffer

KILLED = 128 + signal.SIGKILL  # docker's exit code for a process it lost with its container


class DockerProcess:
    """A command running as a docker exec, with the parts of a text-mode subprocess.Popen
    that sandboxes use: stdin, stdout, stderr, poll, wait, kill, pid, returncode."""

    def __init__(self, api: docker.APIClient, exec_id: str, container_id: str, sock: socket.socket, pending: bytes,
                 args: list[str], engine_down: Callable[[], MachineDown | None] = lambda: None) -> None:
        self.args = args
        self._engine_down = engine_down  # MachineDown once the engine no longer answers: asked when a call fails
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
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            pause = delay if left is None else min(delay, left)
            if self._demux.is_alive():
                self._demux.join(pause)  # the stream ends when the command does: this returns at once then
            else:
                time.sleep(pause)
            delay = min(delay * 2, 0.05)
        return self.poll() or 0  # not None: the loop above ended

    def abandon(self) -> None:
        """Drop output nobody reads any more, so the demultiplexer never waits on a full pipe forever."""
        self._unwanted.set()

    def kill(self) -> None:
        """SIGKILL the command and its process group (docker makes every exec a session leader)."""
        self._unwanted.set()
        if self.poll() is not None:
            return
        pid = self.pid
        if not pid or not in_container(pid, self._container_id):
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
        except (docker.errors.DockerException, requests.RequestException) as e:
            if (down := self._engine_down()) is not None:
                raise down from e  # the engine is gone: no exit code of the command's
            raise
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

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
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


def start_exec(api: docker.APIClient, exec_id: str) -> tuple[socket.socket, bytes]:
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


def in_container(pid: int, container_id: str) -> bool:
    """Whether host pid `pid` is a process of the container (its cgroup path names it)."""
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
