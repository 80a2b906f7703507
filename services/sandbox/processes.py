"""The processes a sandbox starts: each in a session of its own, killed with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, Protocol


class Killable(Protocol):
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def kill_tree(proc: Killable) -> None:
    """Kill a sandboxed process and what it started (each backend's `kill` does the whole tree)."""
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class GroupPopen(subprocess.Popen):
    """A Popen in a session of its own whose `kill` takes its whole process group."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None = None,
                 preexec_fn: Callable[[], object] | None = None) -> None:
        super().__init__(argv, start_new_session=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace", bufsize=1,
                         env=env, cwd=cwd, preexec_fn=preexec_fn)

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            super().kill()


class Process(Protocol):
    """A command started in a sandbox: what each backend's `popen` returns (subprocess.Popen for
    bwrap and the host, DockerProcess, RemoteProcess)."""

    pid: int
    stdin: IO[str]  # always pipes
    stdout: IO[str]
    stderr: IO[str]

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def wait_capped(proc: Process, input: str | None, deadline: float, cap: int) -> tuple[int, str, str, bool, bool]:
    """`proc` given `input`, waited for until `deadline` (time.monotonic) or until it printed more than `cap`
    characters on either stream, then killed if still running: its exit code, what it printed (at most `cap`
    of each), whether the deadline passed, whether it printed too much."""
    out, err = _CappedReader(proc.stdout, cap), _CappedReader(proc.stderr, cap)
    over = threading.Event()
    out.over = err.over = over
    for reader in (out, err):
        reader.start()
    try:
        if input:
            proc.stdin.write(input)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass
    timed_out = False
    while proc.poll() is None and not over.is_set():
        if time.monotonic() >= deadline:
            timed_out = True
            break
        over.wait(0.02)
    if proc.poll() is None:
        kill_tree(proc)
    code = proc.wait()
    for reader in (out, err):
        reader.join(2.0)
    return code, out.text(), err.text(), timed_out, over.is_set()


class _CappedReader(threading.Thread):
    """Reads a pipe to its end, keeping at most `cap` characters; past that sets `over`."""

    def __init__(self, pipe: IO[str], cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.parts, self.size = pipe, cap, [], 0
        self.over = threading.Event()  # replaced by the one both readers of a command share

    def run(self) -> None:
        try:
            while chunk := self.pipe.read(65536):
                if self.size < self.cap:
                    self.parts.append(chunk[: self.cap - self.size])
                self.size += len(chunk)
                if self.size > self.cap:
                    self.over.set()
                    return
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        return "".join(self.parts)
