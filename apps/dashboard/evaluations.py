"""Evaluation folders of `python -m domains.harness` (predictions.jsonl, predictions.csv and, once it ends,
run.json) found among the runs: listed apart on the first page, never as runs of the loop.

A harness folder has no nodes, no archive and no event log: shown as a run it read as a broken one ("0
nodes", "run.json: not a run record"). Its run.json is the harness's own record (domains/harness/split.py
`run_record`), read here as a stranger's data like every file of a handed folder: a regular file, no link
followed, within MAX_RECORD bytes, each value shown only when it has the type the harness writes, text
as one line with every control and bidi character written visibly (services.render.console), cut to
MAX_TEXT characters, and escaped on the page. Nothing here opens a page of its own for it: its
predictions are in the folder, and SCORE_COMMAND, which the page shows, scores it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from apps.dashboard.markup import Markup, h, join
from archive.eval_store import JOURNAL, PREDICTIONS
from services.fsutil import read_below
from services.render import console
from services.user_files import parse_json

MAX_RECORD = 2**16  # a harness run.json is a few hundred bytes
MAX_TEXT = 200  # characters of a text value shown
MAX_JOURNAL = 2**25  # predictions.jsonl, read for its rows (as the run pages read a split's journal)
TEXTS = ("domain", "subset", "agent_path", "model", "sandbox", "started_at", "finished_at", "stopped_by")
COUNTS = ("rows", "done", "errors", "not_run")
SCORE_COMMAND = "python -m domains.report --domain DOMAIN --dname FOLDER"  # the note's, DOMAIN as listed


def is_evaluation(folder: str | Path) -> bool:
    """Whether `folder` is a harness evaluation folder: predictions of its own at its top (the rule
    run_optimization's --resume_from refuses one by), as regular files, not links."""
    for name in (JOURNAL, PREDICTIONS):
        try:
            if os.stat(os.path.join(folder, name), follow_symlinks=False).st_mode & 0o170000 == 0o100000:
                return True
        except OSError:
            continue
    return False


def evaluation_marks(folders: list[Path]) -> tuple:
    """What changes when one of the evaluation `folders` does (its run.json and journal: sizes, times),
    for the live first page."""
    marks = []
    for folder in folders:
        for name in ("run.json", JOURNAL):
            try:
                info = os.stat(folder / name, follow_symlinks=False)
                marks.append((str(folder), name, info.st_mtime_ns, info.st_size))
            except OSError:
                marks.append((str(folder), name, None))
    return tuple(marks)


@dataclass(frozen=True)
class Evaluation:
    """What the listing shows of one evaluation folder."""

    name: str
    facts: dict[str, str]  # TEXTS found, each one visible line (services.render.console), cut
    counts: dict[str, int]  # COUNTS found
    cost_usd: float | None
    problem: str | None  # why its run.json is not shown ("none yet": a harness run still at work)


def read_evaluation(name: str, folder: Path) -> Evaluation:
    try:
        data, cut = read_below(folder, "run.json", MAX_RECORD)
        record = None if cut else parse_json(data)
    except FileNotFoundError:
        return Evaluation(name, {}, {}, None, f"no run.json yet: still running, or stopped before its end "
                                              f"({journal_rows(folder)} rows in its {JOURNAL} so far)")
    except (OSError, ValueError) as e:
        return Evaluation(name, {}, {}, None, f"run.json not shown: {str(e)[:200]}")
    if not isinstance(record, dict):
        return Evaluation(name, {}, {}, None, f"run.json not shown: not a JSON object within {MAX_RECORD} bytes")
    facts = {k: console(record[k], MAX_TEXT) for k in TEXTS if isinstance(record.get(k), str) and record[k]}
    counts = {k: record[k] for k in COUNTS if type(record.get(k)) is int and record[k] >= 0}
    cost = record.get("cost_usd")
    cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) \
        and cost >= 0 else None
    return Evaluation(name, facts, counts, cost, None)


def journal_rows(folder: Path) -> int:
    """Rows an evaluation's journal holds (its lines, within MAX_JOURNAL bytes; a kill can cut the last)."""
    try:
        return read_below(folder, JOURNAL, MAX_JOURNAL)[0].count(b"\n")
    except OSError:
        return 0


def evaluations_table(evaluations: list[Evaluation]) -> Markup:
    """The first page's section of evaluation folders; nothing when there are none."""
    if not evaluations:
        return Markup("")
    head = h("tr", {}, join(h("th", {}, c) for c in ("folder", "domain", "split", "agent", "model", "rows done",
                                                        "errors", "cost", "finished")))
    rows = []
    for e in evaluations:
        counts = e.counts
        done = f"{counts['done']}/{counts['rows']}" if {"done", "rows"} <= set(counts) else ""
        cells = [h("td", {"colspan": 8, "class": "empty"}, e.problem)] if e.problem else [
            h("td", {}, e.facts.get("domain", "")), h("td", {}, e.facts.get("subset", "")),
            h("td", {}, e.facts.get("agent_path", "")), h("td", {}, e.facts.get("model", "")),
            h("td", {"class": "num"}, done), h("td", {"class": "num"}, counts.get("errors", "")),
            h("td", {"class": "num"}, "" if e.cost_usd is None else f"${e.cost_usd:.4f}"),
            h("td", {}, e.facts.get("finished_at", "") + (f" (stopped: {e.facts['stopped_by']})"
                                                           if "stopped_by" in e.facts else ""))]
        rows.append(h("tr", {"class": "evaluation", "data-evaluation": e.name}, h("td", {}, e.name), *cells))
    note = h("p", {"class": "note"}, "Folders of python -m domains.harness: an agent evaluated once on a domain's "
                                     "rows, not a run of the loop (no nodes, no archive). Their predictions are in "
                                     "the folder; ", h("code", {}, SCORE_COMMAND), " scores them, DOMAIN being the "
                                     "folder's domain above (a domain of your own: --domain_spec FILE in its place).")
    return join([h("h2", {"id": "evaluations"}, "Evaluations"), note,
                 h("table", {"class": "evaluations"}, head, join(rows))])
