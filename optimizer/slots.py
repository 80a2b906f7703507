"""Generations in flight: up to `parallel` at once, each on a thread of its own.

This thread, the controller's, owns the archive: it chooses every parent, logs every
`gen_start` and records every node. A slot's thread runs one generation (the meta agent
in its sandbox, then the child's evaluation in another) and hands the node back. Whenever
one comes back, the freed slot starts the next generation from the archive as it is then.

Replay. With `loop.replayable` (the default), generation g waits until every generation
up to g - parallel is recorded and chooses its parent among those; the ones in between
are still children of their parents (archive.candidates counts started generations), so
slots spread over parents instead of all picking the best one. What g sees is then fixed
by g alone, not by which slot happened to finish first: the same seed and the same
`parallel` give the same parents in the same order, when the models answer the same.
With `replayable: false` a freed slot starts at once from every node recorded by then:
faster when generations take very uneven time, not replayable.

Stopping. When the budget stops a node, no new generation starts and the ones in flight
finish (each stops at its next model call). On Ctrl-C, SIGTERM, an outage (a provider's, or this
machine's: a full disk, MachineDown) or a bug, nodes already back are recorded (those this machine
cannot write are left to the resume), every sandbox is closed (what runs inside is killed, so the
threads end), and what was in flight stays a started, unrecorded generation that `--resume_from`
redoes: its meta agent's committed change and its finished evaluations are reused, not paid again.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import TYPE_CHECKING, Protocol

from archive.records import GenStart, Node, Status
from archive.store import Archive
from optimizer.events import Events, NodeFinished, Warned
from services.errors import MachineDown, raise_if_stop_was_dropped, stop_was_caught
from services.sandbox import SandboxLost, close_all

if TYPE_CHECKING:
    from optimizer.context import RunContext

POLL_S = 0.5  # how long the controller blocks at a time (Ctrl-C is seen between waits)
DRAIN_S = 15.0  # after a cancel, how long to wait for the threads to hand back what they were doing
LOST_TRIES = 3  # runs of a generation whose sandbox's machine is lost (a Ray worker node) before it is given up


class Generations(Protocol):
    """What Slots asks of the loop (tests/test_slots.py's StandIn is another): its archive, context
    and events, how a generation begins (its parent, its meta model), and the generation itself."""

    @property
    def archive(self) -> Archive: ...
    @property
    def ctx(self) -> RunContext: ...
    @property
    def events(self) -> Events: ...

    def begin(self, generation: int, upto: int | None) -> GenStart: ...
    def generation(self, start: GenStart) -> Node: ...


def horizon(generation: int, parallel: int, replayable: bool) -> int | None:
    """The last generation that `generation` chooses its parent from and screens against: when the
    run replays, generation - parallel (the ones it waits for; 0 is the initial node, recorded before
    any slot starts), so what it sees does not depend on which slot finished first; else None, every
    node recorded by then."""
    return max(generation - parallel, 0) if replayable else None


class Slots:
    def __init__(self, loop: Generations, parallel: int, replayable: bool) -> None:
        self.loop = loop
        self.parallel = parallel
        self.replayable = replayable
        self.archive = loop.archive
        self.in_flight: dict[str, GenStart] = {}  # node id -> its start
        self.finished: queue.Queue = queue.Queue()  # (node id, Node or None, exception or None)
        self.stopping = False  # the budget ran out: start nothing new

    def run(self) -> None:
        """Redo the generations a kill left unrecorded, then start new ones until `max_generation`
        generations exist or the budget stops one; return when none is in flight."""
        try:
            for start in self.archive.pending_generations():
                self._launch(start)
            while True:
                raise_if_stop_was_dropped()
                while not self.stopping and len(self.in_flight) < self.parallel:
                    start = self._next_start()
                    if start is None:
                        break
                    self._launch(start)
                if not self.in_flight:
                    return
                try:
                    self._take(*self.finished.get(timeout=POLL_S))
                except queue.Empty:
                    self.loop.events.waiting()
        except BaseException as e:
            stop_was_caught(e)
            self._cancel()
            raise

    # -- starting -----------------------------------------------------------------------------
    def _next_start(self) -> GenStart | None:
        """The next generation's start (logged), or None when none may start now."""
        generation = self.archive.next_generation()
        if generation > self.loop.ctx.loop.max_generation:
            return None
        upto = horizon(generation, self.parallel, self.replayable)
        if upto is not None and any(s.generation <= upto for s in self.in_flight.values()):
            return None  # wait: what this generation chooses from is not all recorded yet
        start = self.loop.begin(generation, upto)
        self.archive.log_start(start)
        return start

    def _launch(self, start: GenStart) -> None:
        self.in_flight[start.node_id] = start
        threading.Thread(target=self._work, args=(start,), name=f"generation-{start.node_id}", daemon=True).start()

    def _work(self, start: GenStart) -> None:
        try:
            node = run_generation(self.loop, start)
        except BaseException as e:  # handed to the controller, which stops the run with it
            self.finished.put((start.node_id, None, e))
        else:
            self.finished.put((start.node_id, node, None))

    # -- finishing ----------------------------------------------------------------------------
    def _take(self, node_id: str, node: Node | None, error: BaseException | None) -> None:
        del self.in_flight[node_id]
        if error is not None:
            raise error  # a generation never raises for what an agent did: this is a bug of ours
        assert node is not None  # a generation that did not raise returned its node
        self.archive.record(node)
        self.loop.events.emit(NodeFinished(node))
        if node.status == Status.BUDGET_STOPPED:
            self.stopping = True

    def _cancel(self) -> None:
        """Record what came back already, kill what runs in sandboxes, and let the threads end."""
        while True:
            try:
                node_id, node, _error = self.finished.get_nowait()
            except queue.Empty:
                break
            self.in_flight.pop(node_id, None)
            if node is not None:
                with contextlib.suppress(MachineDown):  # not recorded: the resume redoes it, from what is kept
                    self.archive.record(node)
        if not self.in_flight:
            return
        deadline = time.monotonic() + DRAIN_S
        while self.in_flight and time.monotonic() < deadline:
            close_all()  # again each time: a thread may have opened its next sandbox since
            try:
                node_id, _node, _error = self.finished.get(timeout=POLL_S)
            except queue.Empty:
                continue
            self.in_flight.pop(node_id, None)  # cut short by the cancel: not recorded, redone on resume


def run_generation(loop: Generations, start: GenStart) -> Node:
    """One generation (`loop.generation`), run again where its sandbox's machine was lost: it goes
    on from what is kept (a committed change, finished rows), so a try pays only for what the loss
    cut short."""
    node_id, parent, generation = start.node_id, start.parent, start.generation
    for attempt in range(1, LOST_TRIES + 1):
        try:
            return loop.generation(start)
        except SandboxLost as e:
            lost = e
            if attempt < LOST_TRIES:
                loop.events.emit(Warned(f"node {node_id}: {e}; running it again ({attempt}/{LOST_TRIES})"))
    return Node(node_id, parent, generation, status=Status.LOST,
                error=f"its sandbox's machine was lost {LOST_TRIES} times: {lost}"[:500])
