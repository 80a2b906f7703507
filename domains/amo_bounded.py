"""AMO-Bench's rule checks, run in a child process the host kills when one takes too long.

A prediction is the agent's text, and sympy may spend minutes or gigabytes on it
(`9^{9^{9^9}}`). math-verify bounds its own work with SIGALRM, which only a main thread
may use, and the loop scores on other threads; so every check runs on the main thread of
one long-lived child (`python -m domains.amo_bounded`), which keeps the official timeouts
working, lives under a memory limit, and is killed and replaced when a check outlasts
CHECK_LIMIT_S. A check that had to be stopped, or that the child died of, is a wrong answer,
as an error in the official grader is.

Protocol, one JSON line each way: {"output", "answer", "answer_type", "question_id"} in,
{"ok": bool} out.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from services.config import PROJECT_ROOT

CHECK_LIMIT_S = 60.0  # wall clock of one check; honest answers take about a second
MEMORY_LIMIT = 2 << 30  # bytes of address space the child may map
START_LIMIT_S = 60.0  # for the child to import sympy and math-verify and say it is ready


class ChildFailed(RuntimeError):
    """The checking process could not start: a fault of this machine, not of an answer."""


class BoundedChecker:
    """`rule_check` of `domains.amo_grading`, in a child process; one check at a time."""

    def __init__(self, limit_s: float = CHECK_LIMIT_S):
        self.limit_s = limit_s
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def __call__(self, output: str, answer: str, answer_type: str, question_id: str) -> bool:
        request = {"output": output, "answer": answer, "answer_type": answer_type, "question_id": question_id}
        with self._lock:
            proc = self._child()
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
            except OSError:
                self._kill()
                return False
            reply = _read_line(proc, time.monotonic() + self.limit_s)
            if reply is None:
                self._kill()
                return False
        try:
            return json.loads(reply)["ok"] is True
        except (ValueError, KeyError, TypeError):
            return False

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _child(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(PROJECT_ROOT),
               "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "domains.amo_bounded"], cwd=PROJECT_ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self._proc = proc
        if _read_line(proc, time.monotonic() + START_LIMIT_S) != b'{"ready": true}':
            self._kill()
            raise ChildFailed("the AMO-Bench answer checker (python -m domains.amo_bounded) did not start")
        return proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        proc.wait()


def _read_line(proc: subprocess.Popen, deadline: float) -> bytes | None:
    """One line of the child's output before `deadline`, without its newline; None if none came."""
    fd, data = proc.stdout.fileno(), b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
    return data.rstrip(b"\n")


def _serve() -> None:
    import resource

    from domains.amo_grading import rule_check

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    rule_check("\\boxed{1}", "\\boxed{1}", "number", "")  # imports and warms up before saying ready
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        try:
            r = json.loads(line)
            ok = rule_check(str(r["output"]), str(r["answer"]), str(r["answer_type"]), str(r["question_id"]))
        except Exception:  # a malformed request, or memory the limit refused
            ok = False
        out.write(json.dumps({"ok": bool(ok)}).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
