"""Row scheduling: rows to one agent worker, answers back, until every row is finished or stopped.

A row is timed from when a worker thread takes it up (its "started" message), not from
when it was queued. A row still running after `row_timeout_s` is an error, and since a
stuck thread cannot be stopped, the whole worker is replaced. A worker that dies has its
rows sent once more to a fresh one (MAX_ROW_ATTEMPTS); a row it was running for the
last time fails with the reason it died. Once the budget is spent, no new row is sent.

A row whose answer came while its session's calls failed at the provider (the gateway counts
them, from its own calls, before the agent hears of one) is an infrastructure event, not the
agent's answer: it is not finished, it goes back to the queue, and after MAX_INFRA_TRIES such
tries the gateway probes the provider (ProviderDown when that fails too). Rows run concurrently
in one worker and share its session, so a failure during a row counts for every row in flight
then: a row answered while none failed is the agent's. Once the gateway's breaker trips, the run
stops at once with ProviderDown (MachineDown when this machine failed: a full disk under the journal,
the gateway's socket lost, the local model's server dead): no row in flight is finished, a resume
redoes them.

A row travels to the worker under a token (`Row.token`: random, new in each harness run), never
under its id: ids are the data's, chosen by whoever wrote it, and the agent runs in the worker's
process, where it can read whatever the worker is sent (and the worker names the row's transcript
after it). Answers come back under the token and are finished under the row's id.
"""

from __future__ import annotations

import queue
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.errors import raise_if_stop_was_dropped

if TYPE_CHECKING:
    from domains.harness.worker_client import AgentWorker
    from domains.harness.worker_pipe import WorkerProcess

MAX_ROW_ATTEMPTS = 2  # a row in flight when the worker died is sent once more
MAX_INFRA_TRIES = 3  # tries of a row that met a provider failure, before the gateway probes the provider
# Rows sent ahead of free worker threads, so a thread that finishes finds its next row
# already queued in the worker instead of waiting a round trip through the harness.
PREFETCH_ROWS = 2
POLL_S = 0.2  # longest wait for a worker message before timeouts and the budget are looked at again


def row_token() -> str:
    return secrets.token_hex(6)


@dataclass
class Row:
    qid: str  # the row's id in the data: never sent to the worker
    inputs: dict
    token: str = field(default_factory=row_token)  # what the worker knows the row by
    attempts: int = 0
    started: float | None = None  # when a worker thread took it up; None while queued there
    failures_at_send: int = 0  # its session's provider failures when it was last sent
    infra_tries: int = 0  # tries that met a provider failure


class Scheduler:
    """Runs rows through `agent` (an AgentWorker, started); `finish(rec)` gets each finished row's
    record, and `budget_left()` says why no new row may start (None while one may)."""

    def __init__(self, agent: AgentWorker, num_workers: int, row_timeout_s: float, finish: Callable[[dict], None],
                 budget_left: Callable[[], str | None]) -> None:
        self.agent = agent
        self.window = num_workers + PREFETCH_ROWS  # rows in flight at once
        self.timeout = row_timeout_s
        self.finish = finish
        self.budget_left = budget_left
        self.todo: deque[Row] = deque()
        self.inflight: dict[str, Row] = {}  # by token

    def run(self, rows: list[Row]) -> str | None:
        """Run every row; returns why the run stopped early (the budget), or None."""
        self.todo.extend(rows)
        stopped_by = None
        while self.todo or self.inflight:
            raise_if_stop_was_dropped()
            self.agent.gateway.check_breaker()
            stopped_by = stopped_by or self.budget_left()
            if stopped_by:
                self.todo.clear()
            self._send_more()
            try:
                source, msg = self.agent.results.get(timeout=POLL_S)
            except queue.Empty:
                source, msg = None, {}
            if source is self.agent.proc:
                self._take(msg)
            self._time_out_overdue()
            exited = source is self.agent.proc and msg.get("exited")
            if exited or (self.inflight and not self._proc.alive()):
                self._after_death(drained=bool(exited))
        return stopped_by

    @property
    def _proc(self) -> WorkerProcess:
        assert self.agent.proc is not None, "rows run on a started worker (AgentWorker.ensure_started)"
        return self.agent.proc

    def _send_more(self) -> None:
        while self.todo and len(self.inflight) < self.window:
            row = self.todo.popleft()
            row.started = None
            row.failures_at_send = self._provider_failures()
            self.inflight[row.token] = row
            self._proc.send(row.token, row.inputs)

    def _provider_failures(self) -> int:
        return self.agent.gateway.provider_failures(self.agent.key)

    def _finish(self, row: Row, rec: dict) -> None:
        """Finish `row` with `rec`, unless its session's calls failed at the provider meanwhile, or the
        gateway or the sandbox stopped (ProviderDown, MachineDown, SandboxClosed: a lost socket, or a Docker
        engine that stopped the worker's container, fails the agent's calls before the gateway sees them,
        so only these checks tell the row's answer is no answer)."""
        self.agent.gateway.check_breaker()
        self.agent.sandbox.check_stopped("the agent's worker")
        self.inflight.pop(row.token, None)
        if self._provider_failures() > row.failures_at_send and self._try_again(row):
            return
        self.finish({**rec, "id": row.qid, "token": row.token})

    def _try_again(self, row: Row) -> bool:
        """Whether `row`, which met a provider failure, goes back to the queue (True) or its answer
        stands (False: it met one on every try, yet the provider answers the gateway's probe).
        ProviderDown when the breaker tripped or the probe fails."""
        gateway = self.agent.gateway
        gateway.check_breaker()
        row.infra_tries += 1
        if row.infra_tries >= MAX_INFRA_TRIES:
            gateway.confirm_outage(self.agent.key, f"on {MAX_INFRA_TRIES} tries of one row")
            return False
        row.attempts = 0  # a worker's death during the next try is its first
        self.todo.appendleft(row)
        return True

    def _take(self, msg: dict) -> None:
        """Apply one worker message: a row taken up (its clock and attempts start) or finished."""
        if msg.get("started") in self.inflight:  # tokens are strs: the worker's reader checked every message
            row = self.inflight[msg["started"]]
            row.started = time.monotonic()
            row.attempts += 1
        elif msg.get("id") in self.inflight:
            self._finish(self.inflight[msg["id"]], msg)

    def _time_out_overdue(self) -> None:
        now = time.monotonic()
        overdue = [r for r in self.inflight.values() if r.started is not None and now - r.started > self.timeout]
        for row in overdue:
            self._finish(row, {"id": row.qid, "prediction": None, "error": f"timeout after {self.timeout:g} s"})
        if overdue:  # a stuck thread cannot be stopped: replace the whole worker
            self._restart()

    def _after_death(self, drained: bool) -> None:
        """The worker died: rows on their last attempt fail with its reason, the rest go to a new one."""
        # Stopped by the host (Ctrl-C) or its machine lost: no row failed, none is journaled.
        self.agent.sandbox.check_stopped("the agent's worker")
        if not drained:
            self._drain()  # a row's "started" may still be in the pipe
        for row in list(self.inflight.values()):
            if row.attempts >= MAX_ROW_ATTEMPTS:
                self._finish(row, {"id": row.qid, "prediction": None, "error": self._proc.death_reason()})
        self._restart()

    def _drain(self, wait_s: float = 2.0) -> None:
        """Apply what a dead worker wrote before it died, up to its end of output."""
        proc, deadline = self.agent.proc, time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                source, msg = self.agent.results.get(timeout=left)
            except queue.Empty:
                return
            if source is proc:
                if msg.get("exited"):
                    return
                self._take(msg)

    def _restart(self) -> None:
        """A fresh worker; rows that were in flight go back to the front of the queue."""
        for row in reversed(list(self.inflight.values())):
            self.todo.appendleft(row)
        self.inflight.clear()
        self.agent.stop()
        if self.todo:
            self.agent.start()
