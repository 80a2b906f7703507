"""A wall-clock limit of one command that runs the loop (`--max_minutes`, config `loop.max_minutes`).

At the limit a watcher thread sends SIGINT to the main thread, whose handler (this module's, for as
long as the loop runs) raises TimeLimitReached there. The run then stops as Ctrl-C stops it
(optimizer/slots.py): the nodes already back are recorded, every sandbox is closed, and what was in
flight stays a started generation that `--resume_from` redoes, reusing its committed change and its
finished rows. Nothing recorded is lost; the command ends normally, with the line that continues it.

The limit counts from the command's start (the plan, the model server's start and the preflight
included), so a resume counts afresh; a resume keeps no limit unless it is given one
(archive/run_folder.py PER_COMMAND). A real signal, not a flag the loop polls: the initial node's
evaluation and the final test run on the main thread and poll nothing.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from services.errors import UserError

RESEND_S = 60.0  # a stop Python dropped (raised while a __del__ ran) is sent again after this long


class TimeLimitReached(BaseException):
    """Raised in the main thread at the limit. A BaseException, as Ctrl-C is: no handler of an agent's
    failure catches it, so nothing in flight is recorded as the agent's doing. `why` is what the run's
    event log keeps as the reason it stopped (optimizer/loop.py)."""

    def __init__(self, minutes: float) -> None:
        self.why = f"the time limit of {minutes:g} min (--max_minutes, counted from the command's start) was reached"
        super().__init__(self.why)


def run_within(minutes: float | None, started: float, call: Callable[[], None]) -> bool:
    """`call()` (the loop's run), stopped once `minutes` have passed since `started` (time.monotonic());
    whether the limit stopped it. Without a limit, `call()` alone."""
    if minutes is None:
        call()
        return False
    if threading.current_thread() is not threading.main_thread():
        raise UserError("--max_minutes (loop.max_minutes) stops the run through a signal of the main thread: run it "
                        "from the main thread, or with no limit")
    due, done = threading.Event(), threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if due.is_set() and not done.is_set():
            raise TimeLimitReached(minutes)
        if callable(previous):  # Ctrl-C as before: run_optimization's handler, or Python's
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    def watch() -> None:
        if done.wait(max(0.0, started + minutes * 60 - time.monotonic())):
            return
        due.set()
        while not done.is_set():
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            done.wait(RESEND_S)

    watcher = threading.Thread(target=watch, name="time limit", daemon=True)
    signal.signal(signal.SIGINT, on_sigint)
    try:
        try:
            watcher.start()  # a limit passed already stops the call at once, maybe before start() returns
            call()
        finally:
            done.set()
    except TimeLimitReached:
        return True
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
        if watcher.ident is not None:
            watcher.join()
    return False


def stopped_line(minutes: float, resume: str) -> str:
    """The line a run the limit stopped ends with: why, and `resume` (the command that continues it) with the limit."""
    return (f"stopped: {TimeLimitReached(minutes).why}; nothing recorded is lost, and the generations in flight go "
            f"on from what they kept: to continue: {resume} --max_minutes {minutes:g} (or without --max_minutes: no "
            "limit)")
