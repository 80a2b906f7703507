"""Counting what an evaluation's rows cost, from the gateway's ledger, into `evals/<key>/cost.json`.

A subscriber of the loop's events, so the evaluator's steps stay as they are: at `SplitStarted` it notes
the last call the ledger booked to the node's task agent and the rows the evaluation's journal already
holds; at the `SplitDone` of that evaluation it sums the calls booked since (each node has its own task
session, and a node's evaluations run one after another) and counts the rows the journal gained. That
pass's `Tally` is added to what earlier passes of the same evaluation left (a budget stop, then its
resume), so every row paid is counted once; a pass a kill cut short leaves no tally and its rows are
not counted (their calls are in the ledger and the run's spend all the same). The worker's own report of
a row's usage is not read: it comes from agent code, which could call itself cheap.

When a node is recorded, its cost per row on each domain (archive/row_costs.py) is told as a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from archive.eval_store import EvalStore
from archive.row_costs import Tally, node_tallies, per_row, pooled
from domains.harness import JOURNAL, Journal
from optimizer.events import Event, Events, NodeFinished, RowCostsTold, SplitDone, SplitStarted
from services.gateway.pricing import price_known

if TYPE_CHECKING:
    from archive.records import Node
    from optimizer.context import RunContext

ROLE = "task"  # the calls a row makes: the task agent's (a scorer's judge or grader is the evaluation's own)


@dataclass(frozen=True)
class _Pass:
    key: str
    last_call: int  # the ledger's id of the node's last task call before the pass
    rows_before: int  # rows the journal held as done before the pass


class CostTally:
    def __init__(self, ctx: RunContext, store: EvalStore, events: Events) -> None:
        self.gateway, self.store, self.events = ctx.gateway, store, events
        gw = ctx.config.gateway
        self.priced = price_known(ctx.task_model, gw.prices, ctx.gateway.models.pricing(ctx.task_model))
        self.max_prediction_bytes = ctx.config.harness.max_prediction_bytes  # the journal read as the harness does
        self._open: dict[str, _Pass] = {}  # node id -> its evaluation's pass under way

    def __call__(self, event: Event) -> None:
        if isinstance(event, SplitStarted):
            self._open[event.node_id] = _Pass(event.key, self._last_call(event.node_id), len(self._journal(event.key)
                                                                                            .done_ids()))
        elif isinstance(event, SplitDone):
            started = self._open.get(event.node_id)
            if started is not None and started.key == event.folder:  # not a grading's (a folder of its own)
                del self._open[event.node_id]
                self._close(event.node_id, started)
        elif isinstance(event, NodeFinished):
            if line := self.node_line(event.node):
                self.events.emit(RowCostsTold(event.node.node_id, line))

    def _journal(self, key: str) -> Journal:
        return Journal(self.store.folder(key) / JOURNAL, max_prediction_bytes=self.max_prediction_bytes)

    def _calls(self, node_id: str) -> list[dict]:
        return self.gateway.ledger.calls(node=node_id, role=ROLE)

    def _last_call(self, node_id: str) -> int:
        return max((c["id"] for c in self._calls(node_id)), default=0)

    def _close(self, node_id: str, started: _Pass) -> None:
        """The pass's tally, added to the evaluation's; nothing when the pass ran no row and made no call."""
        calls = [c for c in self._calls(node_id) if c["id"] > started.last_call]
        rows = len(self._journal(started.key).records) - started.rows_before
        if rows <= 0 and not calls:
            return
        failed = [c for c in calls if c["error"] is not None]
        replayed = [c for c in calls if c["error"] is None and c["cache_hit"]]
        paid = [c for c in calls if c["error"] is None and not c["cache_hit"]]
        tally = Tally(max(rows, 0), len(calls), len(failed), len(replayed), sum(c["cost_usd"] for c in paid),
                      sum(c["prompt_tokens"] for c in paid), sum(c["completion_tokens"] for c in paid),
                      sum(c["latency_s"] for c in paid), self.priced)
        before = self.store.tally(started.key)
        self.store.save_tally(started.key, tally if before is None else before + tally)

    def node_line(self, node: Node) -> str:
        """Each domain's cost per row of the node (its splits' tallies pooled), `; `-joined; "" with none."""
        parts = []
        for domain in node.eval_keys:
            found = pooled(node_tallies(node, domain, self.store.tally).values())
            if found is not None:
                parts.append(f"{domain} {per_row(found).text()}")
        return "; ".join(parts)
