"""Errors that end a command with one clear line and exit code 2; clean ends on Ctrl-C and SIGTERM;
the outages that stop a run resumably: a provider's (exit 75) and this machine's (exit 74)."""

from __future__ import annotations

import atexit
import errno
import functools
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn, ParamSpec, TypeVar

from services.render import console


class Error(Exception):
    """What every exception the Python API (hyperagents) raises derives from: UserError (the user's input),
    ProviderDownError (a provider's outage) and MachineDownError (this machine's failure). An Exception, so
    a caller's `except Exception` sees each; Ctrl-C stays KeyboardInterrupt."""


class UserError(Error):
    """A problem with the user's input or environment, not a bug: printed as one line, exit 2.

    Its text often quotes what it found (a folder's record, an agent's error, a file name), so `str()`
    is that text through `services.render.console`: wherever it is shown (the command line's last
    line, a traceback from the Python API, a log), no escape sequence or newline in it acts."""

    def __str__(self) -> str:
        return console(super().__str__())


class AgentFailed(UserError):
    """The agent's code, not the user's input, failed so that it cannot be evaluated: it did not load, its worker
    died before it was ready, its sandbox was stopped for what it wrote. The loop records it on the node
    (load_failed) and goes on; a command that evaluates one agent ends with it as one line, exit 2, as it ends
    for a bad input. A UserError raised while an agent starts is no longer taken for the agent's failure: only
    this is."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every `finally` (sandboxes, gateway) still runs."""


class ModelServerExited(UserError):
    """A model server this process started (the local model's) ended by itself: a crash such as
    SIGSEGV, SIGILL on a CPU it cannot run on, SIGKILL when memory ran out. Its text is one line
    naming the model and how the process ended. A UserError (before a run, a server that cannot start
    on this machine is a set-up problem), so the gateway counts it as a provider failure, never as the
    agent's answer; `LocalServer.dead_reason()` gives the same line to the breaker's health check, which
    stops the run with MachineDown (this machine's failure) once the server died mid-run."""


EXIT_PROVIDER_DOWN = 75  # EX_TEMPFAIL: the run stopped for a provider's failure; the same command may go on later


class ProviderDown(BaseException):
    """The gateway's breaker tripped: a provider failed (its probe too), so no call gets through
    (a dead local model server, this machine's, is MachineDown below). A BaseException, as Ctrl-C is:
    no handler of an agent's failure catches it, so nothing in flight is recorded as the agent's doing,
    and a resume redoes it."""

    def __init__(self, reason: str, folder: Path | None = None) -> None:
        reason = console(reason)  # a provider's or a server's words: shown as a UserError's are
        super().__init__(reason)
        self.reason = reason
        self.folder = folder  # the run folder to resume (the gateway's ledger is there), or None

    def line(self) -> str:
        """The one line a command ends with: the command that resumes, when the entry point gave it
        (`advise`), else the folder to resume."""
        resume = advice_of(self) or (f"resume with --resume_from {self.folder}" if self.folder
                                     else "run the same command again")
        return f"{self.reason}; nothing was recorded from the failed rows; {resume}"


EXIT_MACHINE_DOWN = 74  # EX_IOERR: the run stopped for a failure of this machine; the same command goes on once mended


class MachineDown(ProviderDown):
    """This machine failed the run, not the agent: the host's own I/O (its disk full or over quota, the run
    folder turned read-only or gone, an I/O error), the sandbox engine gone (Docker's daemon stopped, its
    image removed), the local model's server dead, the gateway's socket lost. Raised where the host's own
    write or service failed, never for what agent code did in its sandbox (a sandbox that fills its disk
    is `disk_capped`, the agent's). A ProviderDown, so every handler of an outage treats it alike: nothing
    in flight is recorded as the agent's doing, and a resume redoes it; its exit code is its own (74).
    `reason` is one line naming what failed and where."""

    def line(self) -> str:
        """As ProviderDown's, naming the first failure: a write that failed again on the way out (the
        event log's last line, in a `finally`) does not hide the one that stopped the run."""
        first, seen = self, self.__context__
        while seen is not None:
            first = seen if isinstance(seen, MachineDown) else first
            seen = seen.__context__
        resume = advice_of(self) or (f"resume with --resume_from {self.folder}" if self.folder
                                     else "run the same command again")
        return f"{first.reason}; nothing in flight was recorded; {resume}"


# Errors of a write that only the machine makes: no content of a file, no agent, causes them.
HOST_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
               errno.EROFS: "the file system turned read-only", errno.EIO: "the disk failed (I/O error)",
               errno.ESTALE: "the file system is gone (stale file handle)"}
_SQLITE_HOST = {sqlite3.SQLITE_FULL: "the disk is full", sqlite3.SQLITE_IOERR: "the disk failed (I/O error)",
                sqlite3.SQLITE_READONLY: "the file system turned read-only"}


def machine_failure(error: BaseException, what: str, folder: Path | None = None) -> MachineDown | None:
    """MachineDown for an error of the host's own I/O on `what` (a path, a ledger) that only the machine
    makes (HOST_ERRNOS, SQLite's full disk, I/O error or read-only database); None for any other error."""
    if isinstance(error, MachineDown):
        return error
    if isinstance(error, OSError) and error.errno in HOST_ERRNOS:
        cause, detail = HOST_ERRNOS[error.errno], error.strerror or str(error)
    elif isinstance(error, sqlite3.Error) and (getattr(error, "sqlite_errorcode", 0) & 0xFF) in _SQLITE_HOST:
        cause, detail = _SQLITE_HOST[error.sqlite_errorcode & 0xFF], str(error)
    else:
        return None
    return MachineDown(f"{cause}: cannot write {what} ({detail})", folder)


_ADVICE = "hint: "  # how `advise` marks its note among an exception's notes


def advise(error: BaseException, advice: str) -> None:
    """Keep on `error` (a stop: Ctrl-C, SIGTERM, a provider's outage) what the user can do next, such as
    the exact command that continues the run; the line `exit_on_user_error` ends with says it, and a
    traceback (a caller of the Python API) shows it as a note, as it is: so it is made visible here."""
    error.add_note(_ADVICE + console(advice))


def advice_of(error: BaseException) -> str | None:
    """What `advise` kept on `error` last, or None."""
    notes = [n for n in getattr(error, "__notes__", []) if isinstance(n, str) and n.startswith(_ADVICE)]
    return notes[-1].removeprefix(_ADVICE) if notes else None


_stop_signal: BaseException | None = None  # what the last Ctrl-C or SIGTERM raised


def _raise_stop(signum: int, frame: FrameType | None) -> NoReturn:
    """Ctrl-C or SIGTERM: raise its exception in the main thread, and keep it, since Python drops an
    exception raised while a weakref callback or a __del__ runs (it only prints it)."""
    global _stop_signal
    _stop_signal = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    raise _stop_signal


def raise_if_stop_was_dropped() -> None:
    """For a loop of the main thread that polls: raise again the exception of a Ctrl-C or SIGTERM
    that came but never reached a handler (see `_raise_stop`)."""
    if _stop_signal is not None and threading.current_thread() is threading.main_thread():
        raise _stop_signal


def stop_was_caught(error: BaseException) -> None:
    """`error` reached a handler: if it is the kept Ctrl-C or SIGTERM, it was not dropped, and a
    later poll (a resumed loop in the same process) must not raise it again."""
    global _stop_signal
    if error is _stop_signal:
        _stop_signal = None


_T = TypeVar("_T")


def exit_on_user_error(main: Callable[[], _T]) -> _T:
    """Run `main()`; a UserError becomes one line on stderr and exit code 2, a provider's outage
    (ProviderDown) one line and exit 75, this machine's failure (MachineDown) one line and exit 74,
    Ctrl-C exit 130, SIGTERM exit 143, each after the cleanup of whatever was open. A message may carry
    agent text (a worker's fatal line, an agent's stderr): it is printed through `services.render.console`,
    so no control in it reaches the terminal.

    Called from the top level of the program (`exit_on_user_error(main)` in the `__main__` of a command),
    such an end is the process's: it ends at once (`end_process`). Called from anywhere else (a test, a
    command inside another), it raises SystemExit with the code."""
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        return main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)  # str() of a UserError is made visible already
        code = 2
    except ProviderDown as e:  # a MachineDown too
        print(f"stopped: {console(e.line())}", file=sys.stderr)
        code = EXIT_MACHINE_DOWN if isinstance(e, MachineDown) else EXIT_PROVIDER_DOWN
    except (KeyboardInterrupt, Terminated) as e:
        stop_was_caught(e)
        advice = advice_of(e) or "progress so far is saved; rerun with --resume_from to continue"
        print(f"interrupted: {console(advice)}", file=sys.stderr)
        code = 143 if isinstance(e, Terminated) else 130
    if _is_top_level(sys._getframe(1)):
        end_process(code)
    raise SystemExit(code)


def _is_top_level(frame: FrameType | None) -> bool:
    """Whether `frame` runs the program's own module (`python -m run_optimization`, a script, `python -c`)
    at its top level: what follows there is the interpreter's exit."""
    return frame is not None and frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"


def end_process(code: int) -> NoReturn:
    """End this process with `code` once its atexit handlers ran and stdout and stderr are flushed, without
    the interpreter's teardown.

    The teardown could hang for good (issue 37): as a run on the local model stops, its server's end fails
    the gateway's requests in flight, whose threads (daemons) then import fastapi in litellm's error mapping;
    the teardown freezes daemon threads where they stand, one of them holding the import lock, and litellm's
    `AsyncHTTPHandler.__del__`, which imports as the teardown finalizes it, waited on that lock with
    RUN/.lock held. Even when it did not hang, tearing litellm's thousands of modules down took seconds on
    a busy machine. tests/test_ctrl_c.py presses Ctrl-C at 50 random moments of runs.

    Nothing is lost by it: the cleanup is done (sandboxes, the gateway, the local model's server, the
    ledger closed), every record was written whole and synced by its writer (services/fsutil.py's atomic
    writes, the event log's AppendFile.sync), and a thread cut here is cut as a kill would cut it, which a
    run survives by design. RUN/.lock is a descriptor the kernel closes as the process ends, so its flock
    is released then and not before: no other process takes the run while a thread of this one still runs.
    A second Ctrl-C or SIGTERM meanwhile ends the process by that signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    atexit._run_exitfuncs()  # as at a normal exit (the dashboard a run started stops with it)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a reader that went away
            pass
    os._exit(code)


class ProviderDownError(Error):
    """A ProviderDown as the Python API raises it (`api_errors`): the same `reason`, `folder` and `line()`, the
    ProviderDown itself its __cause__; the same call with `resume_from` goes on."""

    def __init__(self, down: ProviderDown) -> None:
        super().__init__(down.line())
        self.reason, self.folder, self._line = down.reason, down.folder, down.line()

    def line(self) -> str:
        return self._line


class MachineDownError(ProviderDownError):
    """A MachineDown as the Python API raises it (`api_errors`)."""


_P = ParamSpec("_P")


def api_errors(call: Callable[_P, _T]) -> Callable[_P, _T]:
    """`call` as the Python API offers it: a ProviderDown (a BaseException inside the core, so that no handler
    of an agent's failure records an outage as the agent's) leaves it as a ProviderDownError, a MachineDown
    as a MachineDownError, both Exceptions of `Error`."""

    @functools.wraps(call)
    def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return call(*args, **kwargs)
        except MachineDown as e:
            raise MachineDownError(e) from e
        except ProviderDown as e:
            raise ProviderDownError(e) from e

    return wrapped
