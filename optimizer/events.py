"""What the loop tells the world as it runs: typed events, and the subscribers that act on them.

The loop emits; it never prints or draws. The console (one line per event, as a run has
always shown) and the pictures (plots and report.html, redrawn after every node) are
subscribers; the experiment trackers (optimizer/trackers/), a dashboard or a test subscribe the
same way.

Events carry agent text (dropped file names, an agent's stderr, node errors): the console prints
each line through `services.render.console`, so what an agent wrote is shown, never acted on.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from archive.promotion import BestChoice
from archive.records import MetaResult, Node
from archive.store import ScoreRule
from optimizer.initial_agents import DEMO_SCRIPT
from services.render import console as visible

if TYPE_CHECKING:
    from archive.store import Archive
    from domains.base import Domain

DROPPED_SHOWN = 5  # dropped names on a node's line; the rest are counted (all are in node.json)


@dataclass(frozen=True)
class GenerationStarted:
    node_id: str
    parent: str | None
    generation: int
    meta_timeout_s: float
    meta_max_calls: int
    meta_model: str = ""  # named on the console when a bandit chose it among several
    replayed: bool = False  # the meta agent replays the demo's script (optimizer/initial_agents.replays_demo)


@dataclass(frozen=True)
class MetaFinished:
    node_id: str
    result: MetaResult


@dataclass(frozen=True)
class SplitStarted:
    """A harness run of a node's evaluation began (not one reused): `rows` rows into evals/<key>/."""

    node_id: str
    domain: str
    split: str
    rows: int
    key: str


@dataclass(frozen=True)
class SplitDone:
    """One harness run of a node's evaluation finished: a stage, a full split, or a grading."""

    node_id: str
    folder: str  # its folder's name under evals/ (or gradings)
    summary: str  # rows done, errors, the run's cost so far


@dataclass(frozen=True)
class CostBooked:
    node_id: str
    role: str  # meta, try, task, grader, judge
    cost_usd: float
    tokens: int
    cached_tokens: int = 0  # prompt tokens of these calls read from the provider's prompt cache
    cache_saved_usd: float = 0.0  # what that saved against the input price


@dataclass(frozen=True)
class NodeFinished:
    node: Node


@dataclass(frozen=True)
class RowCostsTold:
    """What a row of a node's evaluations costs, per domain (optimizer/cost_tally.py), once the node is recorded."""

    node_id: str
    line: str  # `imo_grading $0.0012 a row (2,310 tokens in, 420 out, 3.1 s), 120 rows; ...`


@dataclass(frozen=True)
class Warned:
    message: str


@dataclass(frozen=True)
class RunStarted:
    """The loop starts (or resumes) the run in this process: subscribers that keep something open
    for the run (an experiment tracker) open it here."""

    run_dir: str


@dataclass(frozen=True)
class RunEnded:
    """The loop ended, by itself or not: `state` is a RunState's text (finished, stopped)."""

    state: str
    why: str | None = None


@dataclass(frozen=True)
class HeldOutGraded:
    """The held-out grader graded a node's proofs again (optimizer/heldout.py): its line, the two grades and the gap."""

    node_id: str
    line: str


@dataclass(frozen=True)
class FinalTested:
    """A line of the final test's result (optimizer/final_test.py)."""

    line: str


Event = (GenerationStarted | MetaFinished | SplitStarted | SplitDone | CostBooked | NodeFinished | RowCostsTold | Warned
         | FinalTested | HeldOutGraded | RunStarted | RunEnded)
Subscriber = Callable[[Event], None]


class Events:
    """Hands every event to each subscriber, in the order they subscribed, one event at a time
    (generations in flight emit from their own threads)."""

    def __init__(self, *subscribers: Subscriber) -> None:
        self.subscribers = list(subscribers)
        self.waiters: list[Callable[[], None]] = []  # called while the controller waits (see `waiting`)
        self._lock = threading.RLock()  # a subscriber may emit (Pictures warns)

    def subscribe(self, subscriber: Subscriber, on_wait: Callable[[], None] | None = None) -> None:
        """Add a subscriber; `on_wait`, if given, is its work left for a moment without events."""
        self.subscribers.append(subscriber)
        if on_wait is not None:
            self.waiters.append(on_wait)

    def waiting(self) -> None:
        """The controller is waiting for a generation: subscribers may do what they put off."""
        with self._lock:
            for on_wait in self.waiters:
                on_wait()

    def emit(self, event: Event) -> None:
        with self._lock:
            for subscriber in self.subscribers:
                subscriber(event)


def console_line(event: Event) -> str | None:
    """The line a person watching the run reads for `event` (None: nothing to say)."""
    if isinstance(event, GenerationStarted):
        on = f" on {event.meta_model}" if event.meta_model else ""
        head = f"generation {event.generation}: node {event.node_id} from parent {event.parent}; the meta agent"
        if event.replayed:
            return (f"{head} replays the next step of {DEMO_SCRIPT} (edits written in advance by people, no model "
                    f"call; up to {event.meta_timeout_s:g} s)")
        return f"{head} is at work{on} (up to {event.meta_timeout_s:g} s and {event.meta_max_calls} model calls)"
    if isinstance(event, MetaFinished):
        patch = event.result.patch
        files = patch.get('files', 0)
        return (f"node {event.node_id}: {event.result.status}; changed {files} file{'' if files == 1 else 's'} "
                f"(+{patch.get('insertions', 0)} -{patch.get('deletions', 0)}){_dropped(patch)}{_bidi(patch)}")
    if isinstance(event, SplitDone):
        return event.summary
    if isinstance(event, CostBooked) and event.cached_tokens and event.cost_usd + event.cache_saved_usd > 0:
        return (f"node {event.node_id}: {event.role} read {event.cached_tokens:,} prompt tokens from the provider's "
                f"cache, saving ${event.cache_saved_usd:.4f} of ${event.cost_usd + event.cache_saved_usd:.4f}")
    if isinstance(event, NodeFinished):
        node = event.node
        stopped = [f"; {d} {lines[-1]}" for d, lines in node.screening.items() if ": stopped: " in lines[-1]]
        suspicious = f"; suspicious: {'; '.join(node.flags)}" if node.flags else ""
        raced = f"; race: {node.raced_out.split(': ', 1)[-1]}" if node.raced_out else ""  # why, after scores_text's
        return f"node {node.node_id} (parent {node.parent}): {node.status}; {node.scores_text()}; " \
               f"cost ${sum(node.cost_usd.values()):.4f}" + "".join(stopped) + raced + suspicious
    if isinstance(event, RowCostsTold):
        return f"node {event.node_id}: task agent per row: {event.line}"
    if isinstance(event, Warned):
        return f"warning: {event.message}"
    if isinstance(event, (FinalTested, HeldOutGraded)):
        return event.line
    return None


def _dropped(patch: dict) -> str:
    names = list(patch.get("dropped") or [])
    if not names:
        return ""
    more = f" and {len(names) - DROPPED_SHOWN} more" if len(names) > DROPPED_SHOWN else ""
    return f", dropped {', '.join(map(str, names[:DROPPED_SHOWN]))}{more}"


def _bidi(patch: dict) -> str:
    files = patch.get("bidi") or []
    return f"; warning: bidi control characters in {', '.join(map(str, files))}" if files else ""


def console(event: Event) -> None:
    """Prints the event's line above the progress bars of the evaluations in flight (one per slot),
    every character a terminal could act on shown visibly."""
    from tqdm import tqdm

    line = console_line(event)
    if line is not None:
        tqdm.write(visible(line), file=sys.stdout)
        sys.stdout.flush()


class Draw(Protocol):
    """What draws a run's pictures from its archive (apps.pictures.draw: the plots and report.html). The
    applications sit above the loop, so the entry points hand it down (optimizer.launch.launch's `draw`)."""

    def __call__(self, archive: Archive, domains: list[Domain], full_sizes: dict[str, int], best_id: str | None,
                 run_dir: Path) -> None: ...


class Pictures:
    """Redraws the run's plots and report.html after a node, at most once every `every_s` seconds:
    the controller calls `catch_up` while it waits, so a node that came back too soon after the
    last drawing is drawn a moment later. Drawing takes a third of a second of the controller's CPU
    (three figures), the largest part of what a generation costs it once sandboxes import no
    litellm, and it bought nothing when nodes come back seconds apart. A picture is never worth a
    run: a failure to draw is a warning event, and the run goes on. With no `drawing` (a loop
    started below the entry points, as some tests do) nothing is drawn."""

    def __init__(self, archive: Archive, domains: list[Domain], full_sizes: dict[str, int], run_dir: Path,
                 events: Events, choice: BestChoice = BestChoice(), rule: ScoreRule = ScoreRule(),
                 every_s: float = 0.0, drawing: Draw | None = None) -> None:
        self.archive, self.domains, self.full_sizes, self.run_dir = archive, domains, full_sizes, run_dir
        self.events, self.choice, self.rule, self.every_s = events, choice, rule, every_s
        self.drawing = drawing
        self.clock = time.monotonic
        self._drawn_at = float("-inf")  # self.clock() when the last drawing ended
        self._behind = False  # a node came back since the last drawing

    def __call__(self, event: Event) -> None:
        if isinstance(event, NodeFinished):
            self._behind = True
            self.catch_up()

    def catch_up(self) -> None:
        """Draw when a node is not in the pictures yet and the last drawing is old enough."""
        if self._behind and self.clock() - self._drawn_at >= self.every_s:
            self.draw()

    def draw(self) -> None:
        self._behind = False
        if self.drawing is None:
            return
        best = self.archive.best(self.domains, self.full_sizes, self.choice, rule=self.rule)
        best_id = best.node_id if best else None
        try:
            self.drawing(self.archive, self.domains, self.full_sizes, best_id, self.run_dir)
        except Exception as e:
            self.events.emit(Warned(f"plots not updated: {type(e).__name__}: {e}"))
        self._drawn_at = self.clock()  # from the end: a drawing slower than every_s does not draw back to back
