"""The processes a sandbox starts: each in a session of its own, killed with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from typing import Protocol


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
