"""Generations in flight, as the event log tells them, and the end of what their meta agent is
writing: the dashboard's view of a run's work under way."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

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


def tail_below(root: Path, relative: str, limit: int) -> tuple[bytes, bool]:
    """The last `limit` bytes of the regular file `relative` under `root`, and whether there was more
    before them; as fsutil.read_below opens it (no link on the way, no fifo)."""
    parts = [p for p in str(relative).split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(f"{relative!r} is not a path below {root}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = below
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as f:
        info = os.fstat(file_fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{relative} is not a regular file")
        start = max(info.st_size - limit, 0)
        f.seek(start)
        return f.read(limit), start > 0
