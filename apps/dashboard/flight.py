"""Generations in flight, as the event log tells them, and the end of what their meta agent is
writing: the dashboard's view of a run's work under way."""

from __future__ import annotations

from dataclasses import dataclass, field

from archive.records import EVAL_KEY, GenStart, Node
from archive.run_state import Phase

MAX_TAIL = 2**16  # the end of a transcript a meta agent is still writing, shown on its in-flight page


@dataclass
class InFlight:
    node_id: str
    parent: str | None
    generation: int
    phase: Phase
    started: str  # time of its gen_start
    splits: list[dict] = field(default_factory=list)  # domain, split, rows, done (rows in the journal)


def in_flight_of(events: list[dict], nodes: dict[str, Node]) -> list[InFlight]:
    """Generations started and not recorded, newest start of each, with the evaluations they began."""
    flights: dict[str, InFlight] = {}
    for e in events:
        kind, node_id = e.get("event"), e.get("node_id")
        if kind == "gen_start" and node_id not in nodes:
            try:
                start = GenStart.from_dict({k: v for k, v in e.items() if k not in ("event", "time")})
            except ValueError:
                continue
            # The initial node has no meta agent: it is evaluated from the start.
            phase = Phase.META if start.parent is not None else Phase.EVALUATING
            flights[start.node_id] = InFlight(start.node_id, start.parent, start.generation, phase,
                                              str(e.get("time", "")))
        elif kind == "node_recorded" and isinstance(node_id, str):
            flights.pop(node_id, None)
        elif kind == "meta_done" and node_id in flights:
            flights[node_id].phase = Phase.EVALUATING
        elif kind == "split_start" and node_id in flights and EVAL_KEY.fullmatch(str(e.get("key", ""))):
            flights[node_id].phase = Phase.EVALUATING
            rows = e.get("rows")
            flights[node_id].splits.append({"domain": str(e.get("domain", "")), "split": str(e.get("split", "")),
                                            "rows": rows if isinstance(rows, int) else 0, "key": e["key"],
                                            "done": 0})
    return [f for node_id, f in flights.items() if node_id not in nodes]
