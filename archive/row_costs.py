"""What a row costs: the task agent's calls on an evaluation's rows, per node, domain and split, and the
accuracy-cost front of a run.

A grader or a prover is deployed for its accuracy and its price; the price is per row (a proof graded, a
problem answered). Each evaluation's `evals/<key>/cost.json` keeps a `Tally`: the calls the gateway booked
to the node's task agent while the evaluation's rows ran (optimizer/cost_tally.py counts them from the
ledger, never from what the agent reports), and the rows they were for. A node shows the tallies its
evaluations point to, so a node that reused another's evaluation shows the rows' cost as it was paid,
once, and the run's spend (the ledger's) is not touched by it.

Per row, a tally is read as "what a row costs when its calls are paid": the mean price of a call the
provider answered, times the calls a row made. Calls the gateway replayed from its response cache (a
resumed evaluation's) are booked at $0, so they count as calls of the row at the mean paid price, not as
free ones; calls that failed at the provider count for nothing. Seconds are the summed latency of a
row's calls (model time, as if rows ran one at a time): parallel rows do not make a row cheaper in time,
only the evaluation shorter. A task model whose price nobody knows (not in litellm's table, no
`gateway.prices`, not a local model) has tokens and seconds per row, and "unknown" dollars, never $0.

The front: the nodes no other node beats on both the selection split's score (higher is better) and $ per
row (lower is better), each with its score's 95% interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields

from archive.records import Node
from services.errors import UserError
from services.plain_data import show

COST_FILE = "cost.json"
COST_SCHEMA = 1
MAX_COST_BYTES = 4096  # a tally is a dozen numbers
MAX_COUNT = 10**12  # calls, rows or tokens of one evaluation: far above any real one
MAX_USD = 10.0**7  # dollars of one evaluation
MAX_SECONDS = 10.0**9


@dataclass(frozen=True)
class Tally:
    """The task agent's calls booked while an evaluation's rows ran, and the rows they were for (summed over
    the passes that ran them: a budget stop and its resume are two)."""

    rows: int = 0  # rows the passes ran (a row kept from a journal before a pass is not among them)
    calls: int = 0  # calls booked, replayed and failed ones included
    failed: int = 0  # calls that failed at the provider
    replayed: int = 0  # answered again from the gateway's response cache (booked at $0)
    cost_usd: float = 0.0  # of the calls the provider answered
    prompt_tokens: int = 0  # of the calls the provider answered
    completion_tokens: int = 0
    model_seconds: float = 0.0  # summed latency of the calls the provider answered
    priced: bool = True  # whether the task model's price was known (else its calls were booked at $0)

    def __add__(self, other: Tally) -> Tally:
        if not isinstance(other, Tally):
            return NotImplemented
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "priced"}
        return Tally(**summed, priced=self.priced and other.priced)

    @property
    def paid(self) -> int:
        """Calls the provider answered (neither failed nor replayed)."""
        return self.calls - self.failed - self.replayed

    def to_dict(self) -> dict:
        return {"schema_version": COST_SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object) -> Tally:
        """A tally in the shape `to_dict` writes, every number within its bounds; else ValueError naming the
        first wrong field. A handed run's file may hold anything: a string, NaN, -1, 1e308."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {show(data)}")
        data = dict(data)
        if data.pop("schema_version", None) != COST_SCHEMA:
            raise ValueError(f"schema_version must be {COST_SCHEMA}")
        names = {f.name for f in fields(cls)}
        if set(data) != names:
            raise ValueError(f"expected the keys {', '.join(sorted(names))}, got {show(sorted(map(str, data)))}")
        for name, value in data.items():
            if problem := _problem(name, value):
                raise ValueError(f"{name} {problem}, got {show(value)}")
        tally = cls(**data)
        if tally.paid < 0:
            raise ValueError(f"failed and replayed calls ({tally.failed} + {tally.replayed}) exceed the calls "
                             f"({tally.calls})")
        return tally


def _problem(name: str, value: object) -> str | None:
    """Why `value` cannot be field `name` of a tally, or None."""
    if name == "priced":
        return None if type(value) is bool else "must be true or false"
    if name in ("cost_usd", "model_seconds"):
        top = MAX_USD if name == "cost_usd" else MAX_SECONDS
        if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= top:  # type: ignore[arg-type]
            return f"must be a number from 0 to {top:g}"
        return None
    return None if type(value) is int and 0 <= value <= MAX_COUNT else f"must be a count from 0 to {MAX_COUNT:g}"


@dataclass(frozen=True)
class RowCost:
    """A tally read per row: None where it cannot say (no row tallied, every call replayed, no known price)."""

    rows: int  # rows tallied
    usd: float | None  # dollars a row
    prompt_tokens: float | None  # tokens in, a row
    completion_tokens: float | None  # tokens out, a row
    seconds: float | None  # model time a row: its calls' summed latency
    total_usd: float | None  # what the tallied rows' paid calls cost

    @property
    def known(self) -> bool:
        return self.usd is not None

    def text(self) -> str:
        """`$0.0012 a row (2,310 tokens in, 420 out, 3.1 s), 100 rows`, or what is unknown."""
        if self.rows == 0:
            return "no row tallied"
        if self.prompt_tokens is None or self.completion_tokens is None or self.seconds is None:
            return f"unknown a row (every call was replayed from the cache), {self.rows} rows"
        return (f"{usd_text(self.usd)} a row ({self.prompt_tokens:,.0f} tokens in, {self.completion_tokens:,.0f} "
                f"out, {self.seconds:.1f} s), {self.rows} rows")


def usd_text(value: float | None) -> str:
    """Dollars to four significant digits, small amounts included (`$0.000123`); None is `unknown`."""
    if value is None:
        return "unknown"
    return f"${value:.4f}" if value >= 0.01 or value == 0 else f"${value:.3g}"


def per_row(tally: Tally) -> RowCost:
    """`tally` per row: the mean paid call's price, tokens and latency, times the calls a row made."""
    answered = tally.calls - tally.failed
    if tally.rows == 0:
        return RowCost(0, None, None, None, None, None)
    total = tally.cost_usd if tally.priced else None
    if answered == 0:  # an agent that calls no model: a row costs nothing, and that is known
        return RowCost(tally.rows, 0.0 if tally.priced else None, 0.0, 0.0, 0.0, total)
    if tally.paid == 0:
        return RowCost(tally.rows, None, None, None, None, total)
    scale = answered / tally.paid / tally.rows
    return RowCost(tally.rows, tally.cost_usd * scale if tally.priced else None, tally.prompt_tokens * scale,
                   tally.completion_tokens * scale, tally.model_seconds * scale, total)


def pooled(tallies: Iterable[Tally]) -> Tally | None:
    """The tallies as one (a node's splits of a domain), None when there is none."""
    found = list(tallies)
    return sum(found[1:], found[0]) if found else None


@dataclass(frozen=True)
class FrontPoint:
    """A node on a domain's plane of score against $ per row."""

    node_id: str
    generation: int
    score: float
    interval: tuple[float, float] | None
    cost: RowCost
    on_front: bool = False


def front(points: Iterable[FrontPoint]) -> list[FrontPoint]:
    """Every point, the non-dominated ones marked, cheapest first: a point is on the front when no other has a
    score at least as high and a price at most as high, one of the two strictly. Points with no known price are
    kept (a table shows them) but never on it."""
    known = [p for p in points if p.cost.usd is not None]
    unknown = [p for p in points if p.cost.usd is None]

    def beaten(p: FrontPoint) -> bool:
        return any(q.score >= p.score and q.cost.usd <= p.cost.usd  # type: ignore[operator]
                   and (q.score > p.score or q.cost.usd < p.cost.usd) for q in known)  # type: ignore[operator]

    marked = [FrontPoint(p.node_id, p.generation, p.score, p.interval, p.cost, not beaten(p)) for p in known]
    marked.sort(key=lambda p: (p.cost.usd, -p.score, p.generation))
    return marked + sorted(unknown, key=lambda p: (-p.score, p.generation))


def node_tallies(node: Node, domain: str, tally_of: Callable[[str], Tally | None]) -> dict[str, Tally]:
    """Split -> the tally of the node's evaluation of `domain` there, where one was kept; `tally_of(key)`
    reads one (EvalStore.tally)."""
    found = {}
    for split, key in node.eval_keys.get(domain, {}).items():
        if (tally := tally_of(key)) is not None:
            found[split] = tally
    return found


def node_row_cost(node: Node, domain: str, tally_of: Callable[[str], Tally | None]) -> RowCost | None:
    """The node's cost per row on `domain`, its splits' tallies pooled; None where none was kept."""
    found = pooled(node_tallies(node, domain, tally_of).values())
    return per_row(found) if found is not None else None


def front_of(nodes: Iterable[Node], domain: str, split: str,
             tally_of: Callable[[str], Tally | None]) -> tuple[list[FrontPoint], list[str]]:
    """`front` of the nodes that ended OK with a full evaluation of `domain` scored on `split`, at their cost per
    row on it; and the problems met (a cost record that is not one the run wrote: its node is left out)."""
    points, problems = [], []
    for node in nodes:
        found = node.evaluation(domain, split)
        if not node.valid_parent or not node.full_eval.get(domain) or found is None or found.score is None:
            continue
        try:
            cost = node_row_cost(node, domain, tally_of)
        except UserError as e:
            problems.append(str(e))
            continue
        if cost is not None:
            points.append(FrontPoint(node.node_id, node.generation, found.score, found.interval, cost))
    return front(points), problems
