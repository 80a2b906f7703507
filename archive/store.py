"""The archive of a run: every node ever made, on disk, and the event log.

`nodes/<id>/node.json` is the record of a finished node, written atomically once its
generation is over: it is the source of truth. `archive.jsonl` is an append-only log
of what happened when (generation started, meta agent done, node recorded); a kill
can cut its last line, which readers skip. A generation with a `gen_start` event but
no node record was interrupted and is redone on resume.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from archive.heldout import read_heldout
from archive.promotion import BestChoice, RowScores, best_rule, choose_best, row_scores
from archive.records import GenStart, MetaResult, Node, Status
from archive.run_state import MAX_LOG
from search.parent_selection import Candidate, candidates_among
from search.registry import best_choice_rule
from services.errors import UserError
from services.fsutil import atomic_write_json, make_folder, open_append, read_bounded, read_regular
from services.user_files import parse_json

if TYPE_CHECKING:
    from archive.eval_store import EvalStore
    from domains.base import Domain
    from services.config import LoopConfig

UNTRUSTED = "untrusted"  # run_dir/untrusted/<node>/<part>/: what the node's sandboxes wrote, never read as a record
META_TRANSCRIPT = "meta_chat_history.md"  # the meta agent's transcript, in the node's untrusted "meta" part


def untrusted_dir(run_dir: Path, node_id: str, part: str) -> Path:
    """A folder a sandbox of the node may write (transcripts of the meta agent, the task agent, the
    grader): untrusted data, apart from the node's records in `nodes/<id>/`, where no sandbox writes."""
    folder = Path(run_dir) / UNTRUSTED / node_id / part
    make_folder(folder)
    return folder


@dataclass(frozen=True)
class ScoreRule:
    """What a node's selection score is made of when it was not evaluated in full (loop config).

    By default a node that only passed screening is selected on its staged train score; the
    HyperAgents reference (utils/gl_utils.py, get_saved_score) uses the staged rows of the
    selection split (val), and scales the initial node like a staged-only node although it
    was evaluated in full, so that it is rarely chosen again."""

    staged_split: str = "train"  # train | selection: loop.staged_score
    scale_initial: bool = False  # loop.scale_initial
    first_stage: dict = field(default_factory=dict)  # domain -> rows of its first stage (the initial node's share)

    @classmethod
    def of(cls, loop: LoopConfig, domains: Iterable[Domain]) -> ScoreRule:
        """From a loop config (services.config.LoopConfig) and the run's domains (domains.base.Domain)."""
        return cls(loop.staged_score, loop.scale_initial,
                   {d.name: stages[0].rows for d in domains if (stages := d.screening(loop))})


def selection_score(node: Node, domain: Domain, full_sizes: dict[str, int],
                    rule: ScoreRule = ScoreRule()) -> float | None:
    """The score the loop selects on for one domain: val where the domain has one, else train.

    A node that only passed the staged evaluation has its staged score (train, or the
    selection split's rows under `rule`) scaled by its share of the full rows, e.g. 10/100,
    as in the reference: a lucky 10-row score must not outrank a node measured on the full set.
    """
    return _scaled_score(node, domain.name, domain.selection_split, full_sizes[domain.name], rule)


def _scaled_score(node: Node, domain: str, split: str, full: int, rule: ScoreRule) -> float | None:
    """`selection_score` of `domain` selected on `split` of `full` rows: the one rule the loop and
    the readers of a run (`run_score`, `observed_score`) all apply."""
    full = max(full, 1)
    found = node.evaluation(domain, split)
    # The share is taken first and the score multiplied by it, as the reference's get_saved_score does
    # (score * 10/100): the other order gives other last bits (0.07 against 0.06999999999999999), which
    # a comparison with loop.tie_tolerance 0 (--preset paper: the reference's plain `max`) would see.
    if rule.scale_initial and node.node_id == "initial":
        share = rule.first_stage.get(domain, full) / full
        return None if found is None or found.score is None else found.score * share
    if (node.full_eval.get(domain) or node.raced_out) and found is not None:
        return found.score  # a raced-out node: the mean of the rows it has, an honest estimate (search/racing.py)
    staged = node.evaluation(domain, split if rule.staged_split == "selection" else "train")
    if staged is not None and staged.score is not None:
        return staged.score * ((staged.rows or 0) / full)
    return None


def mean_score(node: Node, domains: list, full_sizes: dict[str, int], rule: ScoreRule = ScoreRule()) -> float:
    """The node's selection score averaged over domains, a domain without one counting 0."""
    return sum(selection_score(node, d, full_sizes, rule) or 0 for d in domains) / len(domains)


def observed_sizes(domains: list[str], nodes: Iterable[Node]) -> dict[str, tuple[str, int]]:
    """For readers without the domains' data (dashboard, analysis): per domain, the split the loop
    selects on (val when any node has a val score) and its full size (the most rows any node had there)."""
    nodes = list(nodes)
    sizes = {}
    for domain in domains:
        split = "val" if any(n.evaluation(domain, "val") for n in nodes) else "train"
        sizes[domain] = split, max(((e.rows or 0) for n in nodes if (e := n.evaluation(domain, split))), default=0)
    return sizes


def observed_score(node: Node, sizes: dict[str, tuple[str, int]], rule: ScoreRule = ScoreRule()) -> float | None:
    """`mean_score` from `observed_sizes` (a domain without a score counts 0, as the meta model bandit's gains
    count it: optimizer/plan.py's record of the arms); None when no domain has a score."""
    values = [_scaled_score(node, domain, split, full, rule) for domain, (split, full) in sizes.items()]
    known = [v for v in values if v is not None]
    return sum(known) / len(values) if known else None


def run_score(node: Node, sizes: dict[str, tuple[str, int]], rule: ScoreRule = ScoreRule()) -> float | None:
    """What the parents and the best are chosen on, by the loop (`Archive.candidates`, `Archive.best`) and by
    the readers of a run (`observed_best`): the mean of the node's selection scores, None when a domain
    has none (`sizes`: domain -> the split it is selected on and its full rows, the loop's `loop_sizes`
    or `observed_sizes`). A node that loop.row_error left unscored on one domain is no parent and no best."""
    values = [_scaled_score(node, domain, split, full, rule) for domain, (split, full) in sizes.items()]
    return None if None in values else sum(v for v in values if v is not None) / len(values)


def loop_sizes(domains: list, full_sizes: dict[str, int]) -> dict[str, tuple[str, int]]:
    """`run_score`'s sizes as the loop knows them from the domains (domains.base.Domain)."""
    return {d.name: (d.selection_split, full_sizes[d.name]) for d in domains}


def observed_rule(loop: object, domains: list[str]) -> ScoreRule:
    """The ScoreRule a run selected with, from its loop config as run.json keeps it (plain data); the
    default rule when that cannot be read."""
    from domains.registry import get_domain
    from services.config import Config

    try:
        return ScoreRule.of(Config.from_dict({"loop": loop if isinstance(loop, dict) else {}}).loop,
                            [get_domain(d) for d in domains])
    except UserError:
        return ScoreRule()


def selection_rows(node: Node, splits: dict[str, tuple[str, str]], store: EvalStore) -> RowScores:
    """The node's per-row scores on the split it is selected on, every domain's rows together
    (keys "domain/question id"); `splits`: domain -> (split, score key); `store`: the run's
    archive.eval_store.EvalStore. Only full evaluations count, and a raced-out node's rows (search/racing.py);
    a report that cannot be read counts as no rows."""
    found: RowScores = {}
    for domain, (split, score_key) in splits.items():
        key = node.eval_key(domain, split)
        if not (key and (node.full_eval.get(domain) or node.raced_out)):
            continue
        try:
            report = store.report(key)
        except UserError:
            continue
        found.update({f"{domain}/{q}": v for q, v in (row_scores(report, score_key) or {}).items()})
    return found


def observed_best(nodes: list[Node], sizes: dict[str, tuple[str, int]], run_dir: Path, loop: object,
                  search: object = None) -> Node | None:
    """The best node as the run chose it (its config's `loop` and `search` sections, from run.json), for
    readers without the domains' data: scores from `run_score`, rows from the run's reports."""
    from archive.eval_store import EvalStore
    from domains.registry import get_domain

    choice = BestChoice.of(loop if isinstance(loop, dict) else {}, search)
    best_rule(choice)  # settings the rule refuses: a ValueError before anything is read
    store, splits, rule = EvalStore(run_dir), {}, observed_rule(loop, list(sizes))
    if best_choice_rule(choice.rule).reads_rows:
        splits = {d: (split, get_domain(d).score_key) for d, (split, _) in sizes.items()}
    return choose_best([n for n in nodes if n.can_be_best], lambda n: run_score(n, sizes, rule),
                       lambda n: selection_rows(n, splits, store), choice, heldout_grades(run_dir, choice))


def heldout_grades(run_dir: Path, choice: BestChoice) -> Callable[[Node], float | None] | None:
    """A node's held-out grade (archive/heldout.py) as the `heldout` best choice reads it; None for another
    choice. A record that cannot be read is a UserError."""
    if not best_choice_rule(choice.rule).reads_heldout:
        return None
    record = read_heldout(run_dir)
    return (lambda n: record.node_grade(n.node_id)) if record else (lambda n: None)


def event_line(event: str, time: str, **fields: object) -> bytes:
    """One line of archive.jsonl as Archive.log appends it. Pure, so that whatever else writes a run
    folder (the tests' synthetic runs) makes the very same lines."""
    record = {"event": event, "time": time, "schema_version": 1, **fields}
    return json.dumps(record, default=str).encode() + b"\n"


class Archive:
    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.nodes_dir = self.run_dir / "nodes"
        self.log_path = self.run_dir / "archive.jsonl"
        self.nodes: dict[str, Node] = {}
        self._lock = threading.Lock()  # generations in flight log from their own threads
        for path in sorted(self.nodes_dir.glob("*/node.json")):
            node = self._read_node(path)
            self.nodes[node.node_id] = node

    @staticmethod
    def _read_node(path: Path) -> Node:
        """One node record; a garbled or wrongly shaped one is a UserError naming the file, not a traceback."""
        try:
            return Node.from_dict(parse_json(read_bounded(path)), path.parent.name)
        except (OSError, ValueError) as e:  # ValueError: also bad JSON and bad UTF-8
            raise UserError(f"{path}: not a node record the run wrote ({e})") from None

    # -- events ---------------------------------------------------------------------------
    def log(self, event: str, **fields: object) -> None:
        """Append one event; it carries the schema_version of its record (gen_start, meta_done), or 1."""
        line = event_line(event, datetime.now().isoformat(timespec="seconds"), **fields)
        with self._lock, open_append(self.log_path) as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")  # end the line a kill cut short, so this record stays whole
            f.write(line)
            f.sync()  # a disk that refuses it is this machine's failure (MachineDown), never a node's

    def events(self) -> list[dict]:
        """The event log's records, a line a kill cut short skipped; none when there is no log yet. The
        log is a handed folder's file: read without following a link, never waiting on a fifo, and at
        most MAX_LOG bytes; one that is anything else is a one-line UserError naming it."""
        try:
            data = read_regular(self.log_path, MAX_LOG)
        except FileNotFoundError:
            return []
        except OSError as e:
            problem = ("a link, which is never read through" if e.errno == errno.ELOOP else
                       e.strerror if e.errno is not None and e.strerror else str(e))
            raise UserError(f"{self.log_path}: not the run's event log: {problem}") from None
        found = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                record = parse_json(line)
            except ValueError:
                continue  # the line a kill cut short
            if isinstance(record, dict):
                found.append(record)
        return found

    def started(self) -> dict[str, GenStart]:
        """Every generation ever started, by node id: its last `gen_start` event, checked (the log is
        read back, so its shape is not trusted)."""
        found = {}
        for e in self.events():
            if e.get("event") != "gen_start":
                continue
            fields = {k: v for k, v in e.items() if k not in ("event", "time")}
            try:
                start = GenStart.from_dict(fields)
            except ValueError as problem:
                raise UserError(f"{self.log_path}: not a gen_start event the run wrote ({problem})") from None
            found[start.node_id] = start
        return found

    def pending_generations(self) -> list[GenStart]:
        """Started generations whose node was never recorded (a kill, Ctrl-C, or the budget cut them
        short), oldest first: the generations to redo."""
        pending = [s for node_id, s in self.started().items() if node_id not in self.nodes]
        return sorted(pending, key=lambda s: s.generation)

    def log_start(self, start: GenStart) -> None:
        self.log("gen_start", **start.to_dict())

    def log_meta_result(self, node_id: str, result: MetaResult) -> None:
        self.log("meta_done", node_id=node_id, **result.to_dict())

    def meta_result(self, node_id: str) -> MetaResult | None:
        """The meta agent's result for an unfinished node: its change is committed, evaluation may resume."""
        done = [e for e in self.events() if e.get("event") == "meta_done" and e.get("node_id") == node_id]
        if not done:
            return None
        fields = {k: v for k, v in done[-1].items() if k not in ("event", "time", "node_id")}
        try:
            return MetaResult.from_dict(fields)
        except ValueError as e:
            raise UserError(f"{self.log_path}: not a meta_done event the run wrote for node {node_id} ({e})") from None

    # -- nodes ----------------------------------------------------------------------------
    def record(self, node: Node) -> None:
        atomic_write_json(self.nodes_dir / node.node_id / "node.json", node.to_dict())
        with self._lock:
            self.nodes[node.node_id] = node
        self.log("node_recorded", node_id=node.node_id, status=node.status, scores=node.scores)

    def reopen_unfinished(self) -> None:
        """Make nodes the budget stopped, or whose sandbox's machine was lost, pending again, so a
        resumed run (with more budget, or machines back) finishes them from where they stopped."""
        for node in [n for n in self.nodes.values() if n.status in (Status.BUDGET_STOPPED, Status.LOST)]:
            path = self.nodes_dir / node.node_id / "node.json"
            path.replace(path.with_name(f"node.{node.status}.json"))
            del self.nodes[node.node_id]
            self.log("node_reopened", node_id=node.node_id)

    def node_dir(self, node_id: str) -> Path:
        path = self.nodes_dir / node_id
        make_folder(path)
        return path

    def ordered(self) -> list[Node]:
        with self._lock:
            nodes = list(self.nodes.values())
        return sorted(nodes, key=lambda n: (n.generation, n.created_at))

    def candidates(self, domains: list, full_sizes: dict[str, int], upto: int | None = None,
                   rule: ScoreRule = ScoreRule(), failed_meta_bars_parent: bool = False,
                   with_rows: bool = False) -> list[Candidate]:
        """Valid parents with a selection score on every domain, among the recorded nodes of
        generations up to `upto` (all when None).

        A node's children are the generations started from it, finished or still in flight, so
        parallel slots do not all pick the same parent. With `failed_meta_bars_parent` (the
        reference's rule), a node one of whose children's meta agent failed is no longer a parent,
        the initial node excepted. With `with_rows`, each carries its per-row scores on the split it
        is selected on (`selection_rows`), for strategies that read them."""
        from archive.eval_store import EvalStore

        store, splits = EvalStore(self.run_dir), {d.name: (d.selection_split, d.score_key) for d in domains}
        parents = {node_id: s.parent for node_id, s in self.started().items()}
        nodes = [n for n in self.ordered() if upto is None or n.generation <= upto]
        parents.update((n.node_id, n.parent) for n in nodes)
        children = Counter(parents.values())
        barred = {n.parent for n in nodes if n.meta_failed} - {"initial"} if failed_meta_bars_parent else set()
        sizes = loop_sizes(domains, full_sizes)
        return candidates_among(nodes, children, lambda n: run_score(n, sizes, rule),
                                (lambda n: selection_rows(n, splits, store)) if with_rows else None,
                                {b for b in barred if b is not None})

    def next_generation(self) -> int:
        """The number of the next generation to start: after every one recorded or started."""
        with self._lock:
            recorded = [n.generation for n in self.nodes.values()]
        return 1 + max(recorded + [s.generation for s in self.started().values()], default=0)

    def best(self, domains: list, full_sizes: dict[str, int], choice: BestChoice = BestChoice(),
             upto: int | None = None, rule: ScoreRule = ScoreRule(),
             heldout: Callable[[Node], float | None] | None = None) -> Node | None:
        """The run's best valid node (not raced out) under `choice` (archive.promotion.BestChoice; by default the
        highest selection score, the latest among equals), among the nodes of generations up to
        `upto` (all when None) that have a selection score on every domain (a node loop.row_error
        invalid left unscored is no best, as it is no parent). The `heldout` choice reads each node's
        held-out grade with `heldout`, by default from the run's heldout.json."""
        from archive.eval_store import EvalStore

        store, splits = EvalStore(self.run_dir), {d.name: (d.selection_split, d.score_key) for d in domains}
        with self._lock:
            nodes = [n for n in self.nodes.values() if n.can_be_best and (upto is None or n.generation <= upto)]

        sizes = loop_sizes(domains, full_sizes)
        return choose_best(nodes, lambda n: run_score(n, sizes, rule), lambda n: selection_rows(n, splits, store),
                           choice, heldout or heldout_grades(self.run_dir, choice))
