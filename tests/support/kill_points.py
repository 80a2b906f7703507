"""Kills of a run at moments counted in provider calls, for tests/test_loop.py's chaos test.

CallGate wraps a fake provider's responder (support.fake_openai). It keeps what each call that reaches
the provider asked (each start's one-line check of each model aside) and which start sent it. Armed at
the n-th call of a start (or of its meta agent), it holds that call and every later one unanswered (or,
with `answer_it`, answers that one and holds the later ones): the provider has taken them, the run waits
for answers it never gets. A run that waits on a call cannot finish, so the kill that follows lands in
it, at a point of the run fixed by the count, not by how fast the machine is: during a call or, once
the n-th is answered, in whatever the run does before its next call (writing a row, the meta agent's
tools, a commit, recording a node, starting the next step)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from support.cli import REPO_ROOT

PREFLIGHT = "Reply with OK."  # the check of each model a start makes (services/gateway/failures.py)


def is_meta(request: dict) -> bool:
    """Whether `request` is the meta agent's (its opening names its workspace and feedback), as
    support.scripted_loop.responder tells them apart."""
    opening = " ".join(str(m.get("content")) for m in request.get("messages", [])[:2])
    return "/workspace" in opening and "/feedback" in opening


@dataclass
class Call:
    key: str  # what it asked: the model and the messages
    meta: bool
    attempt: int  # which start of the run sent it
    held: bool = False


class CallGate:
    def __init__(self, respond) -> None:
        self.respond = respond
        self.calls: list[Call] = []
        self.attempt = 0
        self._lock = threading.Lock()
        self._nth: int | None = None
        self._meta_only = self._answer_it = self._tripped = False
        self._seen = 0  # calls of the armed kind in this start
        self.caught: Call | None = None  # the call that tripped the gate in this start
        self.reached = threading.Event()
        self._release = threading.Event()

    def __call__(self, request: dict) -> str:
        messages = request.get("messages") or []
        if messages and messages[-1].get("content") == PREFLIGHT:
            return self.respond(request)
        with self._lock:
            call = Call(json.dumps([request.get("model"), messages], sort_keys=True), is_meta(request), self.attempt)
            self.calls.append(call)
            release, trigger = self._release, False
            if self._tripped:
                call.held = True
            elif self._nth is not None and (call.meta or not self._meta_only):
                self._seen += 1
                trigger = self._tripped = self._seen == self._nth
                call.held = trigger and not self._answer_it
                if trigger:
                    self.caught = call
        if call.held:
            if trigger:
                self.reached.set()
            release.wait(timeout=300)  # the run is killed meanwhile; the answer reaches no one
            return "killed before the answer"
        answer = self.respond(request)
        if trigger:
            self.reached.set()
        return answer

    def arm(self, nth: int | None, meta_only: bool = False, answer_it: bool = False) -> None:
        """For the next start: hold its `nth` call (of the meta agent's, with `meta_only`) or, with
        `answer_it`, answer that one and hold the ones after it; None holds none."""
        with self._lock:
            self.attempt += 1
            self._nth, self._meta_only, self._answer_it, self._tripped, self._seen = nth, meta_only, answer_it, False, 0
            self.caught = None
            self.reached = threading.Event()
            self._release = threading.Event()

    def disarm(self) -> None:
        """Let the held calls go (their run is dead) and hold no more."""
        with self._lock:
            self._nth, self._tripped = None, False
            self._release.set()

    def count(self) -> int:
        with self._lock:
            return len(self.calls)

    def held(self) -> int:
        """How many calls of the last start were held."""
        with self._lock:
            return sum(1 for c in self.calls if c.held and c.attempt == self.attempt)

    def answered(self, meta_only: bool = False) -> int:
        """How many different calls (by what they asked) were answered the last time they were asked."""
        with self._lock:
            last = {c.key: c for c in self.calls if c.meta or not meta_only}
        return sum(not c.held for c in last.values())


def start_and_kill_at_call(gate: CallGate, argv: list[str], env: dict, nth: int, meta_only: bool, answer_it: bool,
                           delay: float, log: Path, timeout: float = 300) -> dict:
    """Start `python -m run_optimization *argv` (its output to `log`) and SIGKILL it `delay` seconds after
    its `nth` call (of the meta agent's, with `meta_only`) was held or, with `answer_it`, answered (and
    the ones after it held); what was caught: the kind of that call and how many calls were held."""
    gate.arm(nth, meta_only, answer_it)
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *argv], cwd=REPO_ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    what = f"call {nth} of this start{' of the meta agent' if meta_only else ''}"
    try:
        deadline = started + timeout
        while not gate.reached.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the run {'ended' if proc.poll() is not None else 'ran on'} before {what} "
                                     f"({gate.count()} calls so far):\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(delay)
        assert proc.poll() is None, f"the run ended after {what}:\n{log.read_text(errors='replace')[-3000:]}"
    finally:
        proc.kill()
        proc.wait()
        held, caught = gate.held(), gate.caught
        gate.disarm()
    return {"nth": nth, "meta_only": meta_only, "answered": answer_it, "delay": round(delay, 2),
            "caught": "meta" if caught and caught.meta else "task", "held": held,
            "seconds": round(time.monotonic() - started, 1)}
