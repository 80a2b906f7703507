"""AMO-Bench's rule checks, run in a child process the host kills when one takes too long.

A prediction is the agent's text, and sympy may spend minutes or gigabytes on it
(`9^{9^{9^9}}`). math-verify bounds its own work with SIGALRM, which only a main thread
may use, and the loop scores on other threads; so every check runs on the main thread of
one long-lived child (`python -m domains.amo_bounded`), which keeps the official timeouts
working, lives under a memory limit, and is killed and replaced when a check outlasts
CHECK_LIMIT_S. A check that had to be stopped, or that the child died of, is a wrong answer,
as an error in the official grader is.

Protocol: "ready" once started, then one JSON line each way: {"output", "answer", "answer_type",
"question_id"} in, {"ok": bool} out.
"""

from __future__ import annotations

import json
import os
import sys

from inside.math_equality import BoundedChild
from services.config import PROJECT_ROOT

CHECK_LIMIT_S = 60.0  # wall clock of one check; honest answers take about a second
MEMORY_LIMIT = 2 << 30  # bytes of address space the child may map
START_LIMIT_S = 60.0  # for the child to import sympy and math-verify and say it is ready


class BoundedChecker:
    """`rule_check` of `domains.amo_grading`, in a child process (inside.math_equality.BoundedChild); one
    check at a time."""

    def __init__(self, limit_s: float = CHECK_LIMIT_S) -> None:
        self.limit_s = limit_s
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(PROJECT_ROOT),
               "PYTHONDONTWRITEBYTECODE": "1"}
        self._child = BoundedChild([sys.executable, "-m", "domains.amo_bounded"], START_LIMIT_S,
                                   "the AMO-Bench answer checker (python -m domains.amo_bounded)", env,
                                   str(PROJECT_ROOT))

    def __call__(self, output: str, answer: str, answer_type: str, question_id: str) -> bool:
        request = {"output": output, "answer": answer, "answer_type": answer_type, "question_id": question_id}
        reply = self._child.ask(json.dumps(request), self.limit_s)
        try:
            return reply is not None and json.loads(reply)["ok"] is True
        except (ValueError, KeyError, TypeError):
            return False

    def close(self) -> None:
        self._child.close()


def _serve() -> None:
    import resource

    from domains.amo_grading import rule_check

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    rule_check("\\boxed{1}", "\\boxed{1}", "number", "")  # imports and warms up before saying ready
    out = sys.stdout.buffer
    out.write(b"ready\n")
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
