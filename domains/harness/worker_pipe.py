"""The harness's end of one worker's pipes, where agent code may write anything.

The worker (inside/worker.py) answers in JSON lines on its stdout, but agent code runs in
the same process and can write to any descriptor: every line is read with a bound and
every message checked against what the worker itself writes, in the state it may write
it. Anything else kills the worker, and its rows fail with the reason after their retries.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from inside.worker import USAGE_KEYS, utf8_text
from services.errors import MachineDown
from services.fsutil import open_append

if TYPE_CHECKING:
    from services.sandbox.base import Process, Sandbox

MAX_ERROR_CHARS = 4000  # of a row's error as a worker reports it (predictions.csv shows its first line)


class ProtocolError(Exception):
    """A message the worker never writes: agent code, which runs in the worker, wrote it."""


def _row_id(value: object) -> str:
    if type(value) not in (str, int):
        raise ProtocolError(f"a row id of type {type(value).__name__}")
    return str(value)


def _amount(value: object) -> bool:
    """A non-negative finite number as JSON gives it (True is not one)."""
    return (type(value) is int or type(value) is float) and 0 <= value < math.inf


def _usage(value: object) -> dict:
    """The known counts of a usage report; none at all if one is not an amount."""
    if type(value) is not dict:
        return {}
    usage = {k: value[k] for k in USAGE_KEYS if k in value}
    return usage if all(map(_amount, usage.values())) else {}


def _append(log: IO[str] | None, text: str) -> IO[str] | None:
    """Write to the log; None once that fails (a full disk: MachineDown, which the records' own writes
    meet too), so the copy reads on and drops the rest."""
    if log is not None:
        try:
            log.write(text)
            log.flush()
        except (OSError, ValueError, MachineDown):
            with contextlib.suppress(OSError, MachineDown):
                log.close()
            return None
    return log


def copy_log(stream: IO[str], log_path: Path, cap: int, overflowed: Callable[[], None]) -> None:
    """Append the text `stream` (a worker's stderr) to the log at `log_path`, at most `cap` characters
    of it; past that, `overflowed()` is called once and a line says the worker was killed."""
    # Reads the stream to its end whatever the log file does: a worker blocked on a full pipe
    # would stall its rows until they time out.
    # The file holds at most twice the cap, over all the workers that append to it (each
    # restart after a crash is a new one): an agent that floods stderr and dies, again and
    # again, cannot fill the disk under nodes/.
    try:
        log = io.TextIOWrapper(open_append(log_path), encoding="utf-8", errors="backslashreplace")  # no link followed
        room = max(0, 2 * cap - log.tell())
    except (OSError, MachineDown):
        log, room = None, 0
    written, over = 0, False
    try:
        for chunk in iter(lambda: stream.read(65536), ""):
            if written < min(room, cap):
                log = _append(log, chunk[: min(room, cap) - written])
            written += len(chunk)
            if written > cap and not over:
                over = True
                overflowed()
                log = _append(log, f"\n[harness] output cap of {cap} bytes exceeded: worker killed\n")
    except (OSError, ValueError):
        pass  # the pipe was closed under us
    finally:
        if log is not None:
            with contextlib.suppress(OSError, MachineDown):
                log.close()


class WorkerProcess:
    """One worker speaking JSON lines inside a sandbox; reader threads feed `results` and the log.

    Its stderr (where agent prints land) is copied to `log_path` up to `log_cap` bytes;
    past that the worker is killed, so a flood of output cannot fill the disk.
    Its stdout is hostile too, since agent code in the worker can write to any descriptor:
    lines are read with a bound, and a message the worker never writes (not a JSON object,
    a field of the wrong type, a prediction over the cap, a row not in the state the message
    implies) kills the worker; `violation` says why, and its rows fail with that after their
    retries.
    """

    def __init__(self, proc: Process, log_path: Path, log_cap: int, results: queue.Queue, max_prediction_bytes: int,
                 sandbox: Sandbox | None = None) -> None:
        self.proc = proc
        self.sandbox = sandbox  # whose disk watch may have killed it (Sandbox.disk_capped)
        self.log_path = log_path
        self.log_cap = log_cap
        self.overflowed = False
        self.results = results
        self.max_prediction_bytes = max_prediction_bytes
        self.violation: str | None = None
        self._ready = False
        self._waiting: set[str] = set()  # rows sent and not started: only these may start
        self._running: set[str] = set()  # rows started and not answered: only these may be answered
        threading.Thread(target=self._read, daemon=True).start()
        self._log_thread = threading.Thread(target=copy_log, args=(proc.stderr, log_path, log_cap, self._overflowed),
                                            daemon=True)
        self._log_thread.start()

    def _read(self) -> None:
        # A line holds one capped prediction, each byte of which JSON may spell in up to 6
        # characters (a control character as \u00XX), and a few short fields.
        limit = 6 * self.max_prediction_bytes + 65536
        try:
            while line := self.proc.stdout.readline(limit):
                if not line.endswith("\n"):
                    if len(line) >= limit:
                        raise ProtocolError(f"a line of more than {limit} characters")
                    break  # the worker died in the middle of a line
                self.results.put((self, self._message(line)))
        except ProtocolError as e:
            self.violation = str(e)  # before the kill: whoever sees the worker dead reads it
            self.proc.kill()
        except (OSError, ValueError):
            pass  # the pipe was closed under us
        self.results.put((self, {"exited": True}))

    def _message(self, line: str) -> dict:
        """A line's message with only the fields of its kind, each checked; ProtocolError if the
        worker never writes it."""
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            raise ProtocolError("a line that is not JSON") from None
        if type(msg) is not dict:
            raise ProtocolError("a line that is not a JSON object")
        if "id" in msg:
            return self._answer(msg)
        if "started" in msg:
            qid = _row_id(msg["started"])
            if qid not in self._waiting:
                raise ProtocolError(f"a start of row {qid[:100]!r}, which is not waiting to start")
            self._waiting.discard(qid)
            self._running.add(qid)
            return {"started": qid}
        if not self._ready and msg.get("ready") is True:
            self._ready = True
            return {"ready": True}
        if not self._ready and type(msg.get("fatal")) is str:
            return {"fatal": utf8_text(msg["fatal"][:MAX_ERROR_CHARS])[0]}
        raise ProtocolError("a message of no known kind")

    def _answer(self, msg: dict) -> dict:
        qid = _row_id(msg["id"])
        if qid not in self._running:
            raise ProtocolError(f"an answer for row {qid[:100]!r}, which is not running")
        prediction, error, seconds = msg.get("prediction"), msg.get("error"), msg.get("seconds")
        if prediction is not None:
            if type(prediction) is not str:
                raise ProtocolError("a prediction that is not a string")
            prediction, size = utf8_text(prediction)
            if size > self.max_prediction_bytes:
                raise ProtocolError(f"a prediction of {size} bytes, over the cap of {self.max_prediction_bytes}")
        if error is not None:
            if type(error) is not str:
                raise ProtocolError("an error that is not a string")
            error = utf8_text(error[:MAX_ERROR_CHARS])[0]
        if seconds is not None and not _amount(seconds):
            raise ProtocolError("seconds that are not a number")
        self._running.discard(qid)
        return {"id": qid, "prediction": prediction, "error": error, "usage": _usage(msg.get("usage")),
                "seconds": seconds}

    def _overflowed(self) -> None:
        self.overflowed = True
        self.proc.kill()

    def death_reason(self) -> str:
        if self.violation:
            return f"protocol violation: the worker wrote {self.violation}; it was killed"
        if self.overflowed:
            return f"the worker was killed for printing more than {self.log_cap} bytes (see {self.log_path.name})"
        if capped := getattr(self.sandbox, "disk_capped", None):
            return f"the worker was killed for {capped}"
        return f"the worker died while running this row (see {self.log_path.name})"

    def send(self, qid: str, inputs: dict) -> None:
        self._waiting.add(qid)  # before the worker can see it, so its start is never early
        try:
            self.proc.stdin.write(json.dumps({"id": qid, "inputs": inputs}) + "\n")
            self.proc.stdin.flush()
        except OSError:  # it died, or agent code closed its input: killed, its rows are retried
            self.proc.kill()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        self._log_thread.join(5)
