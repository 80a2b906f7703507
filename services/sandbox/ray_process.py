"""A command running in a remote sandbox, seen as a text-mode subprocess.Popen.

The parts sandboxes' callers use: stdin (write, flush, close), stdout and stderr
(`readline(limit)`, `read(n)`), `poll`, `wait`, `kill`, `pid`, `returncode`. Each is a
call to the sandbox's host actor on its worker node (services/sandbox/ray_host.py);
reads wait there for output, a few seconds per call. When the node is lost, reads
return the end of the stream and `poll` says the command died, as they would for a
command killed here; the sandbox's next command raises SandboxLost.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.sandbox.ray_backend import RaySandbox

READ_CHARS = 2**20  # most characters one read call brings back
READ_WAIT_S = 5.0  # how long one read call waits on the node for output
WAIT_STEP_S = 5.0  # how long one wait call waits on the node
LOST = -signal.SIGKILL  # the exit code of a command whose node is gone


class RemoteProcess:
    def __init__(self, box: RaySandbox, ident: int, pid: int, args: list[str]) -> None:
        self.box, self.ident, self.pid, self.args = box, ident, pid, args
        self.returncode: int | None = None
        self.stdin = _Stdin(self)
        self.stdout = _Reader(self, "stdout")
        self.stderr = _Reader(self, "stderr")

    def call(self, method: str, *args: object) -> Any:  # noqa: ANN401 - as RaySandbox.call
        return self.box.call(method, self.ident, *args)

    def _ended(self, code: int | None) -> int | None:
        if code is not None and self.returncode is None:
            self.returncode = code
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self._ended(self.call("poll"))
            except RuntimeError:  # SandboxClosed (its node is gone), or its host failed
                self._ended(LOST)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            step = WAIT_STEP_S if deadline is None else min(WAIT_STEP_S, deadline - time.monotonic())
            if step <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            try:
                self._ended(self.call("wait", step))
            except RuntimeError:  # SandboxClosed (its node is gone), or its host failed
                self._ended(LOST)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                self.call("kill")
            except RuntimeError:  # SandboxClosed (its node is gone), or its host failed
                self._ended(LOST)


class _Stdin:
    """Text written is sent at each newline, flush or close, in one call."""

    def __init__(self, proc: RemoteProcess) -> None:
        self.proc = proc
        self._pending: list[str] = []
        self._closed = False
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if self._closed:
            raise ValueError("write to closed file")
        with self._lock:
            self._pending.append(text)
        if "\n" in text:
            self.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._pending = "".join(self._pending), []
            if not text:
                return
            try:
                delivered = self.proc.call("write", text)
            except RuntimeError:  # SandboxClosed (its node is gone), or its host failed
                delivered = False
        if not delivered:
            raise BrokenPipeError("the command no longer reads its input")

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            try:
                self.proc.call("close_stdin")
            except RuntimeError:  # SandboxClosed (its node is gone), or its host failed
                pass


class _Reader:
    """One output stream, drained from the node; "" only at its end."""

    def __init__(self, proc: RemoteProcess, stream: str) -> None:
        self.proc, self.stream = proc, stream
        self._buffer = ""
        self._eof = False
        self._lock = threading.Lock()

    def _fill(self) -> None:
        """Wait for more of the stream; sets `_eof` at its end."""
        while not self._eof:
            try:
                text = self.proc.call("read", self.stream, READ_CHARS, READ_WAIT_S)
            except RuntimeError:  # SandboxClosed (its node is gone), or its host failed
                text = ""
            if text is None:
                continue  # nothing yet
            if text == "":
                self._eof = True
            self._buffer += text
            return

    def read(self, n: int = -1) -> str:
        """What there is, at most `n` characters (all of the stream with n < 0); "" at the end."""
        with self._lock:
            if n is None or n < 0:
                while not self._eof:
                    self._fill()
                text, self._buffer = self._buffer, ""
                return text
            if not self._buffer:
                self._fill()
            text, self._buffer = self._buffer[:n], self._buffer[n:]
            return text

    def readline(self, limit: int = -1) -> str:
        """One line with its newline, or `limit` characters of one, or the rest at the end."""
        with self._lock:
            while True:
                end = self._buffer.find("\n")
                if end >= 0 and (limit < 0 or end < limit):
                    cut = end + 1
                    break
                if 0 <= limit <= len(self._buffer) or self._eof:
                    cut = len(self._buffer) if limit < 0 else min(limit, len(self._buffer))
                    break
                self._fill()
            text, self._buffer = self._buffer[:cut], self._buffer[cut:]
            return text

    def close(self) -> None:
        pass
