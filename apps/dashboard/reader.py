"""A run folder as the dashboard reads it: read-only, bounded, and re-read only when it changed.

Records (node.json, run.json, the event log, reports) are read in the shape the core writes
and checked as the loop checks them; a record that is not one is shown as a problem, not
trusted. What agents wrote (patches, transcripts, predictions) is read as bounded text,
without following a link. Nothing here writes to the run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from apps.dashboard.flight import MAX_TAIL, InFlight, in_flight_of
from apps.dashboard.run_files import MAX_JOURNAL, Text, read_journal, read_labels, read_text
from archive.eval_store import JOURNAL, PREDICTIONS, REPORT
from archive.promotion import row_scores
from archive.records import EVAL_KEY, NODE_ID, Node, RunRecord
from archive.run_folder import ledger_of
from archive.run_state import Phase, RunState, read_events, run_state, state_text
from archive.store import META_TRANSCRIPT, UNTRUSTED, observed_best, observed_rule, observed_sizes, run_score
from services.errors import UserError
from services.fsutil import read_below, read_bounded
from services.ledger import NotALedger
from services.user_files import parse_json

if TYPE_CHECKING:
    from archive.store import ScoreRule
    from domains.base import Domain

T = TypeVar("T")  # what a ledger query returns
MAX_RECORD = 2**20  # node.json
MAX_REPORT = 2**24  # evals/<key>/report.json (as the loop reads it)


@dataclass
class RunData:
    """One reading of a run: what the pages are made from."""

    name: str
    path: Path
    record: RunRecord | None
    nodes: dict[str, Node]
    in_flight: list[InFlight]
    events: list[dict]
    problems: list[str]  # records that could not be read, with why
    state: RunState  # running, finished, stopped, interrupted (archive/run_state.py)
    why: str | None  # why it stopped or was interrupted
    _scores: dict = field(default_factory=dict, repr=False)  # node id -> score(), read once per reading

    @property
    def live(self) -> bool:
        """The loop is running (else a generation started and not recorded was cut short)."""
        return self.state == RunState.RUNNING

    @property
    def status(self) -> str:
        return state_text(self.state, self.why)

    @property
    def title(self) -> str:
        """The run's name (--name; run.json checks it: one printable line, bounded), "" when unnamed."""
        return self.record.name if self.record is not None else ""

    @property
    def tags(self) -> list[str]:
        return list(self.record.tags) if self.record is not None else []

    @property
    def domains(self) -> list[str]:
        return list(self.record.domains) if self.record else sorted({d for n in self.nodes.values() for d in n.scores})

    @cached_property
    def _sizes(self) -> dict[str, tuple[str, int]]:
        return observed_sizes(self.domains, list(self.nodes.values()))

    @cached_property
    def _rule(self) -> ScoreRule:
        return observed_rule(self.record.config.get("loop") if self.record is not None else None, self.domains)

    def selection_split(self, domain: str) -> str:
        """The split the run selects on for `domain`, as its nodes' scores show it (val when any has one)."""
        return self._sizes[domain][0] if domain in self._sizes else "val"

    def score(self, node: Node) -> float | None:
        """The node's score as the loop selects on it, averaged over the run's domains."""
        if node.node_id not in self._scores:
            self._scores[node.node_id] = run_score(node, self._sizes, self._rule)
        return self._scores[node.node_id]

    @cached_property
    def _best(self) -> Node | None:
        config = self.record.config if self.record is not None else {}
        try:
            return observed_best(list(self.nodes.values()), self._sizes, self.path, config.get("loop"),
                                 config.get("search"))
        except (ValueError, UserError) as e:  # a run.json this reader cannot follow: the highest score
            self.problems.append(f"run.json: best node by the highest score ({e})")
            return observed_best(list(self.nodes.values()), self._sizes, self.path, {})

    def best(self) -> Node | None:
        return self._best

    def lineage(self, node_id: str | None) -> list[str]:
        """`node_id` and its ancestors, up to the initial node."""
        chain, seen = [], set()
        while node_id is not None and node_id in self.nodes and node_id not in seen:
            chain.append(node_id)
            seen.add(node_id)  # a loop of parents (a forged record) ends here
            node_id = self.nodes[node_id].parent
        return chain

    def interval(self, node: Node) -> tuple[float, float] | None:
        """A 95% interval of `node`'s score, when each domain has one on the split the run selects on and was
        evaluated in full: with several domains, the mean of their bounds (never narrower than the mean's)."""
        bands = []
        for domain, (split, _) in self._sizes.items():
            found = node.evaluation(domain, split)
            if not node.full_eval.get(domain) or found is None or found.interval is None:
                return None
            bands.append(found.interval)
        if not bands:
            return None
        return sum(b[0] for b in bands) / len(bands), sum(b[1] for b in bands) / len(bands)

    def best_so_far(self) -> list[tuple[int, Node]]:
        """Per generation 0..the last recorded, the node with the best score up to it (from the first scored)."""
        by_generation: dict[int, list[tuple[float, Node]]] = {}
        for node in self.nodes.values():
            if node.valid_parent and (score := self.score(node)) is not None:
                by_generation.setdefault(node.generation, []).append((score, node))
        curve, best, best_score = [], None, float("-inf")
        for generation in range(max(by_generation, default=-1) + 1):
            for score, node in by_generation.get(generation, []):
                if best is None or score > best_score:
                    best, best_score = node, score
            if best is not None:
                curve.append((generation, best))
        return curve

    def cost(self) -> float:
        return sum(sum(n.cost_usd.values()) for n in self.nodes.values())

    def updated(self) -> str:
        return self.events[-1].get("time", "") if self.events else ""


class RunReader:
    """Reads one run folder, again only when its event log, run.json or nodes changed."""

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or self.path.name  # how the dashboard names it ("group/seed-1" for a replicate)
        self.ledger = ledger_of(self.path)
        self._lock = threading.Lock()
        self._seen: tuple | None = None
        self._data: RunData | None = None
        self._split_cache: dict[tuple, tuple] = {}
        self._labels_cache: dict[tuple, tuple] = {}  # (key, id col, label col) -> (predictions.csv's stat, labels)
        self._nodes: dict[str, tuple] = {}  # node id -> (its node.json's stat, the record read from it)
        self._ledger_marks: list | None = None
        self._ledger_cache: dict[tuple, Any] = {}  # what -> its query's result (each what has its own type)

    def version(self) -> str:
        """Changes whenever something a page shows may have changed (for the live pages): records and rows
        done before the dash, the ledger after it (calls come often: pages follow them at a slower pace)."""
        data = self.read()
        rows = [self._seen, *(self._stat(f"evals/{s['key']}/{JOURNAL}") for f in data.in_flight for s in f.splits),
                *(self._stat(self._transcript_path(f.node_id)) for f in data.in_flight if f.phase == Phase.META)]
        spend = [self._stat("ledger.sqlite"), self._stat("ledger.sqlite-wal")]
        return f"{hash(tuple(rows)) & 0xFFFFFFFFFFFF:x}-{hash(tuple(spend)) & 0xFFFFFFFFFFFF:x}"

    def _stat(self, relative: str) -> tuple | None:
        try:
            info = os.stat(self.path / relative, follow_symlinks=False)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size

    def read(self) -> RunData:
        with self._lock:
            seen = self._marks()
            if self._data is None or seen != self._seen:
                self._data, self._seen = self._load(), seen
            self._refresh_in_flight(self._data)
            return self._data

    def _marks(self) -> tuple:
        marks = []
        for name in ("archive.jsonl", "run.json", "nodes"):
            try:
                info = os.stat(self.path / name, follow_symlinks=False)
                marks.append((info.st_mtime_ns, info.st_size, info.st_ino))
            except OSError:
                marks.append(None)
        return tuple(marks)

    def _load(self) -> RunData:
        from domains.registry import run_domain_problems

        problems = run_domain_problems(self.path)  # its spec domains (domains/spec.py): score key, stages
        record = None
        try:
            record = RunRecord.read(self.path)
        except FileNotFoundError:
            problems.append("run.json: missing")
        except (OSError, ValueError) as e:
            problems.append(f"run.json: not a run record ({e})")
        nodes, kept = {}, {}
        folder = self.path / "nodes"
        for entry in sorted(os.scandir(folder), key=lambda e: e.name) if folder.is_dir() else []:
            if not NODE_ID.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path) / "node.json"
            try:
                info = os.stat(path, follow_symlinks=False)
                mark = (info.st_mtime_ns, info.st_size, info.st_ino)
                if self._nodes.get(entry.name, (None,))[0] == mark:  # written once, atomically: unchanged
                    nodes[entry.name] = self._nodes[entry.name][1]
                else:
                    nodes[entry.name] = Node.from_dict(parse_json(read_bounded(path, MAX_RECORD)), entry.name)
                kept[entry.name] = (mark, nodes[entry.name])
            except FileNotFoundError:
                continue  # a generation redone after a kill, or one reopened: not recorded (yet)
            except (OSError, ValueError) as e:
                problems.append(f"nodes/{entry.name}/node.json: not a node record ({str(e)[:300]})")
        self._nodes = kept
        try:
            self.ledger.tables()
        except NotALedger as e:
            problems.append(self._problem(e))
        events = read_events(self.path / "archive.jsonl")
        state, why = run_state(events)
        return RunData(self.name, self.path, record, nodes, in_flight_of(events, nodes), events, problems,
                       state, why)

    def _refresh_in_flight(self, data: RunData) -> None:
        for flight in data.in_flight:
            for split in flight.splits:
                split["done"] = self.rows_done(split["key"])

    def rows_done(self, key: str) -> int:
        """Rows in an evaluation's journal so far (its lines; a kill can cut the last one)."""
        try:
            data, _ = read_below(self.path, f"evals/{key}/{JOURNAL}", MAX_JOURNAL)
        except OSError:
            return 0
        return data.count(b"\n")

    # -- the ledger, read again only when it changed -----------------------------------------
    def spend(self, node: str | None = None) -> list[dict]:
        return self._ledger(("spend", node), lambda: self.ledger.spend(node), [])

    def spend_over_time(self, measure: str = "dollars") -> tuple[list[float], dict[str, list[float]]]:
        return self._ledger(("over_time", measure), lambda: self.ledger.spend_over_time(measure=measure), ([], {}))

    def _ledger(self, what: tuple, query: Callable[[], T], empty: T) -> T:
        """A query's result until the ledger changes; `empty` for one this project did not write (a problem)."""
        marks = [self._stat("ledger.sqlite"), self._stat("ledger.sqlite-wal")]
        with self._lock:
            if self._ledger_marks != marks:
                self._ledger_marks, self._ledger_cache = marks, {}
            if what not in self._ledger_cache:
                if len(self._ledger_cache) > 256:  # node pages of a big run: keep the latest
                    self._ledger_cache.clear()
                try:
                    self._ledger_cache[what] = query()
                except NotALedger as e:  # shown in place: the run's page lists it among its problems
                    self._ledger_cache[what] = empty
                    if self._data is not None and (problem := self._problem(e)) not in self._data.problems:
                        self._data.problems.append(problem)
            return self._ledger_cache[what]

    def _problem(self, e: NotALedger) -> str:
        return "ledger.sqlite" + str(e).removeprefix(str(self.ledger.path))

    # -- what a node page shows -----------------------------------------------------------
    def patch(self, node_id: str) -> Text:
        return read_text(self.path, f"nodes/{node_id}/patch.diff")

    def transcript(self, node_id: str) -> Text:
        return read_text(self.path, self._transcript_path(node_id))

    def transcript_tail(self, node_id: str) -> Text:
        """The last MAX_TAIL bytes of the transcript a meta agent is writing, from a line's start."""
        text = read_text(self.path, self._transcript_path(node_id), MAX_TAIL, tail=True, none="none written yet")
        if text.cut and "\n" in text.text:
            text.text = text.text[text.text.index("\n") + 1:]
        return text

    @staticmethod
    def _transcript_path(node_id: str) -> str:
        return f"{UNTRUSTED}/{node_id}/meta/{META_TRANSCRIPT}"

    def split_rows(self, key: str) -> tuple[list[dict], set[str] | None]:
        """An evaluation's rows (id, prediction, error), the ids its report marks failed (None without one)."""
        if not EVAL_KEY.fullmatch(key):
            return [], None
        try:
            info = os.stat(self.path / "evals" / key / JOURNAL, follow_symlinks=False)
            mark = (info.st_mtime_ns, info.st_size)
        except OSError:
            return [], None
        cached = self._split_cache.get((key,))
        if cached and cached[0] == mark:
            return cached[1], cached[2]
        rows = read_journal(self.path, key)
        failed = None
        report = self.report(key)
        if isinstance(report, dict) and isinstance(report.get("question_ids_failed"), list):
            failed = {str(q) for q in report["question_ids_failed"]}
        self._split_cache[(key,)] = (mark, rows, failed)
        return rows, failed

    def report(self, key: str) -> dict | None:
        """An evaluation's report.json, None when it has none (yet) or it is not a JSON object."""
        if not EVAL_KEY.fullmatch(key):
            return None
        try:
            report = parse_json(read_below(self.path, f"evals/{key}/{REPORT}", MAX_REPORT)[0])
        except (OSError, ValueError):
            return None
        return report if isinstance(report, dict) else None

    def row_scores(self, key: str, score_key: str) -> dict[str, float] | None:
        """Per row, the score the report gives it (archive.promotion.row_scores checks it)."""
        report = self.report(key)
        return row_scores(report, score_key) if report is not None else None

    def labels(self, key: str, id_column: str, label_column: str) -> dict[str, str]:
        """Row id -> the gold label, from the evaluation's predictions.csv (it holds the data set's columns):
        for the person reading the dashboard only; nothing here reaches an agent. Cached until it changes."""
        if not EVAL_KEY.fullmatch(key):
            return {}
        mark = self._stat(f"evals/{key}/{PREDICTIONS}")
        cached = self._labels_cache.get((key, id_column, label_column))
        if cached and cached[0] == mark:
            return cached[1]
        found = read_labels(self.path, key, id_column, label_column)
        if len(self._labels_cache) > 256:  # node pages of a big run: keep the latest
            self._labels_cache.clear()
        self._labels_cache[(key, id_column, label_column)] = (mark, found)
        return found


def known_domain(name: str) -> Domain | None:
    """The domain `name` as this version defines it, or None (its run is shown without labels or score key)."""
    from domains.registry import get_domain

    try:
        return get_domain(name)
    except (UserError, KeyError, ValueError):
        return None
