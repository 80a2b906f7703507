"""Refused requests: counted per (node, role, reason) in the ledger, in place, and rate limited.

A refusal costs its sender nothing, so agent code can send them as fast as the gateway answers.
Each (node, role, reason) is one ledger row whose count grows: a flood writes no new bytes.
Past REFUSALS_PER_S (a burst of REFUSAL_BURST) for one node and role, the refusal is counted in
memory (written with that pair's next refusal within the rate, or when the gateway stops) and its
connection is closed: the sender reconnects for each further refusal, and the ledger is written at
most REFUSALS_PER_S times a second per node and role.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from services.gateway.budget import Budget

if TYPE_CHECKING:
    from services.gateway.machine import LedgerWrites

REFUSALS_PER_S = 20.0
REFUSAL_BURST = 100.0


class Refusals:
    def __init__(self, ledger: LedgerWrites, run_id: str, budget: Budget, per_s: float = REFUSALS_PER_S,
                 burst: float = REFUSAL_BURST) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.budget = budget  # counts them at once, for the run's totals
        self.per_s = per_s
        self.burst = burst
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], list[float]] = {}  # (node, role) -> [tokens, when last filled]
        self._pending: dict[tuple[str, str, str], list] = {}  # (node, role, reason) -> [count, last message]

    def count(self, node: str, role: str, reason: str, message: str) -> bool:
        """Count one refusal; True when it is past the rate (close the caller's connection)."""
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.setdefault((node, role), [self.burst, now])
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.per_s)
            bucket[1] = now
            within = bucket[0] >= 1
            bucket[0] -= within
            pending = self._pending.setdefault((node, role, reason), [0, message])
            pending[0] += 1
            pending[1] = message
            due = [(k, *self._pending.pop(k)) for k in list(self._pending) if k[:2] == (node, role)] if within else []
        self.budget.add_refused(1)
        for (n, r, why), count, text in due:
            self.ledger.refuse(self.run_id, n, r, why, text, count)
        return not within

    def flush(self) -> None:
        """Write the counts still held in memory (the gateway stops)."""
        with self._lock:
            due, self._pending = self._pending, {}
        for (node, role, reason), (count, message) in due.items():
            self.ledger.refuse(self.run_id, node, role, reason, message, count)
