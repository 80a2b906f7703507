"""This machine's failures as the gateway meets them: its ledger's disk, the socket sandboxes reach it by.

A call the ledger cannot book (a full disk, a file system turned read-only, an I/O error) is not
answered: the caller would keep what it made of an answer the run never paid for in its records. The
first such failure, or the socket found gone (`Listeners.lost`), stops every later call as a provider's
outage does, and the harness, the meta agent's outcome and the loop meet it as MachineDown through
`Gateway.check_breaker`, in their own threads: never as a row's or a node's failure.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from services.errors import MachineDown, machine_failure
from services.ledger import Call, Ledger


class MachineFailures:
    """The first failure of this machine the gateway met; the run's folder is `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._down: MachineDown | None = None
        self._lock = threading.Lock()

    @property
    def reason(self) -> str | None:
        """Why every call is refused, as one line; None while none failed."""
        return self._down.reason if self._down is not None else None

    def failed(self, down: MachineDown) -> None:
        with self._lock:
            self._down = self._down or down

    def check(self, lost: str | None = None) -> None:
        """MachineDown once this machine failed (or now, for `lost`: why the gateway is unreachable)."""
        if lost is not None:
            self.failed(MachineDown(lost, self.folder))
        if self._down is not None:  # a new one for each caller: one raised in several threads would gather their frames
            raise MachineDown(self._down.reason, self._down.folder)

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[None]:
        """Within: a write of `what` (the ledger) that the machine fails is kept (`failed`) and raised as
        MachineDown; any other error as it is."""
        try:
            yield
        except (sqlite3.Error, OSError) as e:
            down = machine_failure(e, what, self.folder)
            if down is None:
                raise
            self.failed(down)
            raise down from e


class Reach:
    """How callers reach the gateway: by the name of its Unix socket (a sandbox connects by that name), on
    the threads that serve its listeners."""

    def __init__(self, socket: Path, threads: list[threading.Thread]) -> None:
        info = socket.lstat()
        self.socket, self.threads, self._bound = socket, threads, (info.st_dev, info.st_ino)
        self.closed = False  # the gateway stopped: nothing is lost

    def lost(self) -> str | None:
        """Why callers can no longer reach the gateway, in one line, or None: its socket's name is gone or
        names another file (a cleaner of the temp folder removed it), or a listener's thread ended. This
        machine's doing, never an agent's: no sandbox can write there."""
        if self.closed:
            return None
        try:
            info = self.socket.lstat()
        except OSError as e:
            return f"the gateway's socket {self.socket} is gone ({e.strerror})"
        if (info.st_dev, info.st_ino) != self._bound:
            return f"the gateway's socket {self.socket} was replaced by another file"
        ended = next((t.name for t in self.threads if not t.is_alive()), None)
        return None if ended is None else f"the gateway's listener ({ended}) stopped"


class LedgerWrites:
    """The gateway's writes of its ledger: a call, a refusal count, a cached answer; one the machine fails
    is MachineDown, kept by `machine` (`MachineFailures.writing`)."""

    def __init__(self, ledger: Ledger, machine: MachineFailures) -> None:
        self.ledger = ledger
        self.machine = machine

    def record(self, call: Call) -> None:
        with self.machine.writing(f"the ledger {self.ledger.path}"):
            self.ledger.record(call)

    def refuse(self, run_id: str, node: str, role: str, reason: str, message: str, count: int = 1) -> None:
        with self.machine.writing(f"the ledger {self.ledger.path}"):
            self.ledger.refuse(run_id, node, role, reason, message, count)

    def cache_put(self, key: str, response: str, cost_usd: float) -> None:
        with self.machine.writing(f"the ledger {self.ledger.path}"):
            self.ledger.cache_put(key, response, cost_usd)
