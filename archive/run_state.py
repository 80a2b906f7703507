"""What a run and its generations in flight are doing, in one vocabulary: the words the console
(optimizer/plan.py), report.html (apps/report.py) and the dashboard (apps/dashboard/) print.

A run's state comes from its event log: the loop logs `run_start` (its pid and host) and, when it
ends by itself or is stopped, `run_end` with the state it ended in and why. A `run_start` with no
`run_end` after it is a run in progress while its process lives, else one that was interrupted
(killed with -9, or its machine went down).
"""

from __future__ import annotations

import json
import socket
from enum import StrEnum
from pathlib import Path

from services.fsutil import read_bounded

EVENTS = "archive.jsonl"  # the run's event log (archive/store.py writes it)
MAX_LOG = 64 * 2**20  # a line per event, about 300 bytes each


class RunState(StrEnum):
    NEW = "not started"  # no process has run its loop yet
    RUNNING = "running"  # a process runs it now
    FINISHED = "finished"  # the loop ended by itself: its generations done
    STOPPED = "stopped"  # ended early, resumably: the budget, Ctrl-C or SIGTERM, a provider's outage, an error
    INTERRUPTED = "interrupted"  # its process is gone without ending it (killed with -9, the machine went down)


class Phase(StrEnum):
    """What a generation in flight is doing."""

    META = "meta agent at work"
    EVALUATING = "evaluating"


def state_text(state: RunState, why: str | None) -> str:
    return f"{state}: {why}" if why else str(state)


def run_state(events: list[dict]) -> tuple[RunState, str | None]:
    """The run's state from its events, and why it stopped (None when there is nothing to say)."""
    for e in reversed(events):
        if e.get("event") == "run_end":
            try:
                state = RunState(e.get("state", RunState.STOPPED))
            except ValueError:
                state = RunState.STOPPED
            why = e.get("why")
            return state, why if isinstance(why, str) and why else None
        if e.get("event") == "run_start":
            pid = e.get("pid")
            if e.get("host") != socket.gethostname() or type(pid) is not int or pid <= 0:
                return RunState.RUNNING, None  # another machine's run, or an older log: running while it writes
            if Path(f"/proc/{pid}").exists():
                return RunState.RUNNING, None
            return RunState.INTERRUPTED, "its process ended without ending the run; resume it with --resume_from"
    return RunState.NEW, None


def read_state(run_dir: Path) -> tuple[RunState, str | None]:
    """`run_state` of a run folder."""
    return run_state(read_events(Path(run_dir) / EVENTS))


def read_events(path: Path) -> list[dict]:
    """The event log's records that are JSON objects; a line a kill cut short is skipped."""
    try:
        data = read_bounded(path, MAX_LOG)
    except OSError:
        return []
    return json_objects(data)


def json_objects(data: bytes) -> list[dict]:
    """The lines of a JSON-lines file that are JSON objects; a line a kill cut short is skipped."""
    found = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            found.append(record)
    return found
