"""Staged evaluation of a node, with content-addressed results.

A node is first screened: each stage runs every domain's train split on its first rows
(10 by default, `Domain.screening`), and the next stage, then the full evaluation
(grading: train and val; proofs: all problems), runs only if every domain passes the
stage's promotion rule (search/promotion/: by default the paper's, a score above the
stage's bar, 0; or a paired comparison with the parent or the best node on the rows they
share). The test split is never part of it (`optimizer.final_test`). Each (task-agent code, model,
domain, split, rows) has its folder in the run's EvalStore: a task agent that did not
change is never paid for twice (unless `loop.reuse_evaluations` is off: then the node is part
of what `agent_hash` names), and an evaluation a kill interrupted resumes from its journal. A
longer train run starts from the rows of the longest screening run before it, which are its
first rows.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from archive.eval_store import EvalStore
from archive.promotion import Promotion, RowScores, Verdict, decide, row_scores
from archive.records import DomainEval
from archive.store import untrusted_dir
from domains.base import Domain
from domains.harness import (
    JOURNAL,
    PREDICTIONS,
    AgentWorker,
    Journal,
    SplitResult,
    grade_run,
    load_rows,
    run_split,
    worker_mounts,
)
from domains.judge import GatewayJudge
from optimizer.events import Events, SplitDone, SplitStarted
from optimizer.racing import Racer
from search.racing import Target
from search.registry import promotion_rule
from search.stats import Estimate, interval
from services.choices import RowError, StageSplits
from services.errors import AgentFailed, UserError
from services.fsutil import make_folder
from services.sandbox import Sandbox
from services.workspace import discard
from services.write_failures import write_failure

if TYPE_CHECKING:
    from domains import scoring
    from domains.base import Stage
    from optimizer.context import RunContext
    from services.workspace import RunRepo


@dataclass
class SplitScore:
    score: float | None
    rows: int
    key: str | None  # where the evaluation is kept (EvalStore); None: nowhere that counts (loop.row_error)
    row_scores: RowScores | None = None  # question id -> its share of the score (None: a report without them)
    note: str | None = None  # why the score is not its run's own (loop.row_error invalid), for the node's record

    @property
    def interval(self) -> Estimate | None:
        return interval(list(self.row_scores.values())) if self.row_scores else None

    def record(self) -> DomainEval:
        """What the node's record keeps of it."""
        band = self.interval
        return DomainEval(self.score, self.rows, self.key, (round(band.low, 4), round(band.high, 4)) if band else None)


@dataclass
class DomainResult:
    splits: dict[str, SplitScore] = field(default_factory=dict)
    full: bool = False
    screening: list[str] = field(default_factory=list)  # each stage's verdict, as a line to read
    raced_out: str | None = None  # loop.racing's verdict when the full evaluation stopped early (search/racing.py)


@dataclass
class Peers:
    """What a child's screening compares it with, by domain: the row scores of its parent's and of the
    archive's best node's train evaluations (None where there is none)."""

    parent: dict[str, RowScores | None] = field(default_factory=dict)
    best: dict[str, RowScores | None] = field(default_factory=dict)
    best_node: str | None = None  # whose rows `best` holds
    # loop.racing's targets (search/racing.py): the best node's and the parent's selection scores, and the low
    # end of the best's 95% interval on the selection split(s) (optimizer.racing.race_targets)
    best_target: Target | None = None
    parent_target: Target | None = None
    best_low: float | None = None


class BudgetStop(Exception):
    """The run's budget ran out during an evaluation."""


class LoadFailed(Exception):
    """The node's task agent, or another entry point it must have, does not import."""


def split_rows(domain: Domain, split: str, limit: int) -> int:
    """How many rows an evaluation of `split` with `limit` (-1 = all) covers."""
    total = len(domain.load(split))
    return total if limit < 0 else min(limit, total)


class Evaluator:
    def __init__(self, ctx: RunContext, events: Events | None = None) -> None:
        self.run_dir, self.config, self.gateway, self.sandboxes = ctx.run_dir, ctx.config, ctx.gateway, ctx.sandboxes
        self.task_model = ctx.task_model
        self.events = events or Events()
        self.store = EvalStore(ctx.run_dir)
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)  # one evaluation per key at once
        self._locks_lock = threading.Lock()
        self.racer = Racer(self, split_rows)  # loop.racing: the full evaluation's selection split in chunks

    def node_sandbox(self, node_id: str, node_dir: Path, transcripts: Path,
                     check_imports: Sequence[str] = ()) -> NodeSandbox:
        """A node's evaluation sandbox (see NodeSandbox); its worker writes transcripts to `transcripts`
        and nothing else, its log goes to `node_dir`."""
        workspace = self.run_dir / "workspaces" / f"{node_id}-eval"
        return NodeSandbox(self, workspace, node_id, node_dir, transcripts, list(check_imports))

    def evaluate(self, domains: list[Domain], node: NodeSandbox, agent_hash: str, timings: dict | None = None,
                 peers: Peers | None = None, first_stage_only: bool = False) -> dict[str, DomainResult]:
        """Staged, then full evaluation of every domain; raises BudgetStop when the money runs out
        and LoadFailed when the task agent or one of the node's entry points does not load.

        Every split runs through the node's one worker, whose loading of the agent is the load
        check (timed as "check" in `timings`); evaluations already done are reused as they are.
        Each stage's promotion rule compares the child with `peers` on the rows they share. With
        `first_stage_only`, the first stage's rows are all (no verdict, no full evaluation).
        """
        results = {d.name: DomainResult() for d in domains}
        timings = timings if timings is not None else {}
        started = time.monotonic()
        try:
            node.worker.start()
        except AgentFailed as e:
            raise LoadFailed(str(e)) from None
        finally:
            timings["check"] = round(time.monotonic() - started, 3)
        started = time.monotonic()

        def run(d: Domain, split: str, limit: int) -> None:
            results[d.name].splits[split] = self.split(d, split, split_rows(d, split, limit), node, agent_hash)

        screening = {d.name: d.screening(self.config.loop) for d in domains}
        for k in range(max(map(len, screening.values()), default=0)):
            staged = [(d, screening[d.name][k]) for d in domains if k < len(screening[d.name])]
            for d, stage in staged:
                for split in self.stage_splits(d):
                    run(d, split, stage.rows)
            verdicts = [] if first_stage_only else [self._screen(d, stage, results[d.name], peers or Peers())
                                                    for d, stage in staged]
            if first_stage_only or not all(v.promote for v in verdicts):
                timings["eval"] = round(time.monotonic() - started, 3)
                return results
        raced = self.racer.run(domains, node, agent_hash, peers or Peers(), results)
        if raced is not None and raced.raced_out:
            for d in domains:
                results[d.name].raced_out = raced.line
            timings["eval"] = round(time.monotonic() - started, 3)
            return results
        for d in domains:
            for split in d.full_splits():
                run(d, split, self.config.loop.eval_samples)
            results[d.name].full = True
        timings["eval"] = round(time.monotonic() - started, 3)
        return results

    def stage_splits(self, domain: Domain) -> list[str]:
        """The splits each screening stage runs on its first rows: train, whose score the stage's rule
        reads, and with `loop.stage_splits` train_and_val (the paper's) the selection split too, so a
        node that stops there is selected on val rows, as in the reference."""
        also = self.config.loop.stage_splits == StageSplits.TRAIN_AND_VAL and domain.selection_split != "train"
        return ["train", domain.selection_split] if also else ["train"]

    def evaluate_splits(self, domains: list[Domain], node: NodeSandbox, agent_hash: str,
                        split: str) -> dict[str, SplitScore]:
        """`split` of every domain, all its rows (`loop.eval_samples`), no stages: the final test."""
        try:
            node.worker.start()
        except AgentFailed as e:
            raise LoadFailed(str(e)) from None
        return {d.name: self.split(d, split, split_rows(d, split, self.config.loop.eval_samples), node, agent_hash)
                for d in domains}

    def _screen(self, domain: Domain, stage: Stage, result: DomainResult, peers: Peers) -> Verdict:
        """The stage's verdict on one domain, also kept (as a line) in `result.screening`."""
        loop = self.config.loop
        rule = Promotion(stage.rule or loop.promotion)
        train = result.splits["train"]
        if train.score is None and train.note:  # the task agent raised on a row: no score (loop.row_error)
            verdict = Verdict(False, train.note)
        elif train.row_scores is None:  # an evaluation kept before reports had row scores
            score = train.score or 0
            verdict = Verdict(score > stage.above, f"score {score:.3f} {'>' if score > stage.above else '<='} "
                                                   f"{stage.above:g} (no row scores to compare)")
        else:
            verdict = decide(rule, stage.above, train.row_scores, peers.parent.get(domain.name),
                             peers.best.get(domain.name))
            if promotion_rule(rule.rule).reads_best and peers.best_node is not None:
                verdict = Verdict(verdict.promote, f"{verdict.reason} (best node {peers.best_node})")
        result.screening.append(f"{stage.rows} rows: {'on' if verdict.promote else 'stopped'}: {verdict.reason}")
        return verdict

    def split(self, domain: Domain, split: str, rows: int, node: NodeSandbox, agent_hash: str) -> SplitScore:
        """The score of one split; two generations in flight with the same task agent (a child that
        only changed the meta agent, and its sibling) take turns: the second reuses the first's."""
        key = self.store.key(agent_hash, domain.name, split, rows, self.task_model)
        with self._locks_lock:
            lock = self._locks[key]
        with lock:
            found = self._split_once(domain, split, rows, node, agent_hash, key)
        return self._after_raises(domain, split, agent_hash, found)

    def _split_once(self, domain: Domain, split: str, rows: int, node: NodeSandbox, agent_hash: str,
                    key: str) -> SplitScore:
        report = self.store.report(key)
        if report is not None:
            return self._scored(domain, report, rows, key)
        # A longer run starts from the rows of a shorter one, its first rows: a screening stage's, a race's look.
        for smaller in sorted(self._shorter(domain, split, rows), reverse=True):
            if self.store.seed(key, self.store.key(agent_hash, domain.name, split, smaller, self.task_model)):
                break
        folder = self.store.folder(key)
        self.events.emit(SplitStarted(node.node_id, domain.name, split, rows, key))
        try:
            rows_to_run = load_rows(domain, split, num_samples=rows)
            self.kept(node.node_id, run_split(domain, rows_to_run, node.worker, folder,
                                              label=f"node {node.node_id} {domain.name} {split}",
                                              asked={"subset": split, "proofs_dname": None, "num_samples": rows}))
            report = self._score(domain, folder, node.node_id)
        except UserError as e:
            if self.gateway.budget_left_message():
                raise BudgetStop(str(e)) from None
            raise
        except Exception as e:  # a scorer's own call (a judge's) that a provider's outage failed is not the node's
            if isinstance(e, OSError) and (down := write_failure(e, e.filename or folder)) is not None:
                raise down from e  # nor is this machine's failure to write (a full disk)
            self.gateway.confirm_outage()
            raise
        self.store.save_report(key, report)
        return self._scored(domain, report, rows, key)

    def _shorter(self, domain: Domain, split: str, rows: int) -> set[int]:
        """The shorter evaluations of `split` a run of `rows` rows may start from: the screening stages' (on
        the splits they run) and, with loop.racing, the race's looks (on the selection split). Each is
        within the split, so its evaluation ran exactly its rows."""
        loop = self.config.loop
        found = {s.rows for s in domain.screening(loop)} if split in self.stage_splits(domain) else set()
        if self.racer.races(domain) and split == domain.selection_split:
            found |= set(self.racer.looks(domain))
        return {n for n in found if n < rows}

    @staticmethod
    def _scored(domain: Domain, report: dict, rows: int, key: str) -> SplitScore:
        return SplitScore(report.get(domain.score_key), rows, key, row_scores(report, domain.score_key))

    def kept(self, node_id: str, result: SplitResult) -> SplitResult:
        """`result`, told as an event; BudgetStop if the budget left rows unsent."""
        self.events.emit(SplitDone(node_id, result.folder.name, result.line("run's cost so far")))
        if result.stopped_by:
            raise BudgetStop(result.stop_message())
        return result

    def _score(self, domain: Domain, folder: Path, node_id: str) -> dict:
        """The domain's report from its scorer; graded predictions are graded first, outside
        the workspace, by the installed grader, with calls booked to the node."""
        return domain.scorer.score(domain, folder / PREDICTIONS, NodeTools(self, node_id))

    def _after_raises(self, domain: Domain, split: str, agent_hash: str, found: SplitScore) -> SplitScore:
        """`found`, as loop.row_error has it when the task agent's code raised on some of its rows.

        `wrong` (the default) keeps such a row as a wrong answer, the rest of the run standing. `invalid`
        is the reference's outcome: its harness (domains/harness.py) re-raises a row's exception from
        `future.result()`, so the run writes no predictions.csv and its report is not made. A run of its
        own has then no score; a longer run, which in the reference continues in the folder of the
        screening run of its first rows, has that run's report (its rows, e.g. 10; a full evaluation
        still), or none when that one raised too."""
        raised = raised_rows(self.store.folder(found.key)) if found.key else 0
        if self.config.loop.row_error != RowError.INVALID or not raised:
            return found
        why = f"the task agent raised on {raised} of its {found.rows} rows (loop.row_error invalid)"
        shorter = ({s.rows for s in domain.screening(self.config.loop) if s.rows < found.rows}
                   if split in self.stage_splits(domain) else set())
        for smaller in sorted(shorter, reverse=True):
            key = self.store.key(agent_hash, domain.name, split, smaller, self.task_model)
            report = self.store.report(key)
            if report is None:
                continue
            if raised_rows(self.store.folder(key)):
                break
            kept = self._scored(domain, report, smaller, key)
            kept.note = f"{why}: kept its first {smaller} rows' evaluation, which it continued"
            return kept
        return SplitScore(None, found.rows, None, None, f"{why}: no score")


# The worker's own refusal of an answer over harness.max_prediction_bytes: a limit of ours, not the agent raising.
_OVER_CAP = re.compile(r"prediction of \d+ bytes is over the cap of \d+")


def raised_rows(folder: Path) -> int:
    """How many rows of the evaluation in `folder` the task agent's own code ended with an error: its
    worker answered the row (a journal record with the row's usage) with an exception, or with what
    forward() returned that is no (prediction, messages) pair, which the reference's harness cannot
    unpack either. Rows the harness ended (a timeout, a worker's death) and a prediction over the cap
    are ours to end and do not count. A row whose calls failed at the provider is tried again, and its
    answer stands only once the provider answers the gateway's own probe (ProviderDown otherwise): then
    the agent's own requests failed, which in the reference raise and end its harness too."""
    journal = folder / JOURNAL
    if not journal.exists():
        return 0
    return sum(1 for rec in Journal(journal).records.values()
               if isinstance(error := rec.get("error"), str) and error and "usage" in rec
               and not _OVER_CAP.fullmatch(error.split("\n", 1)[0]))


class NodeTools:
    """What a scorer asks the loop for (domains.scoring.ScoringTools): the run's gateway, its
    calls booked to the node; a grader in a sandbox of its own."""

    def __init__(self, evaluator: Evaluator, node_id: str) -> None:
        self.evaluator = evaluator
        self.config = evaluator.config  # what a scorer reads of the run's settings (harness.label_case)
        self.node_id = node_id

    def judge(self) -> GatewayJudge:
        return GatewayJudge(self.evaluator.config, gateway=self.evaluator.gateway, node=self.node_id)

    def grade(self, grading: scoring.Domain, grader_agent: str, predictions: Path) -> Path:
        # A scorer types its grading domain by the little it reads; the one it grades with is a registered domain.
        assert isinstance(grading, Domain)
        ev = self.evaluator
        transcripts = untrusted_dir(ev.run_dir, self.node_id, "grader")  # never under evals/, which the core writes
        result = ev.kept(self.node_id, grade_run(grading, grader_agent, predictions, ev.config, ev.gateway,
                                                 sandboxes=ev.sandboxes, node=self.node_id, transcripts=transcripts))
        return result.folder / PREDICTIONS


class NodeSandbox:
    """A node's evaluation workspace, its sandbox and its task-agent worker.

    Entered with an empty workspace; `fill` puts the files of a commit in place, and the worker
    starts and loads the agent when `Evaluator.evaluate` asks. The workspace holds the files
    only, without git metadata, and is removed on exit.
    """

    def __init__(self, evaluator: Evaluator, workspace: Path, node_id: str, node_dir: Path, transcripts: Path,
                 check_imports: list[str]) -> None:
        self.evaluator = evaluator
        self.workspace = workspace
        self.node_id = node_id
        self.node_dir = node_dir
        self.check_imports = check_imports
        self.transcripts = transcripts
        self._stack = contextlib.ExitStack()
        self.box: Sandbox  # both made on entering
        self.worker: AgentWorker

    def __enter__(self) -> NodeSandbox:
        ev = self.evaluator
        discard(self.workspace)  # left by a killed run
        self.workspace.mkdir(parents=True)
        self._stack.callback(shutil.rmtree, self.workspace, ignore_errors=True)
        try:
            make_folder(self.transcripts)
            self.box = self._stack.enter_context(ev.sandboxes.open(self.workspace, worker_mounts(self.transcripts)))
            self.worker = AgentWorker(self.box, "task_agent", ev.task_model, ev.config, ev.gateway, self.node_id,
                                      "task", self.transcripts, self.node_dir / "worker.log",
                                      also_import=self.check_imports)
            self._stack.callback(self.worker.stop)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def fill(self, repo: RunRepo, commit: str) -> None:
        """The files of `commit` into the (empty) workspace, owned as the sandbox needs."""
        repo.export(commit, self.workspace)
        self.box.adopt(self.workspace)
