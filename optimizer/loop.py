"""The self-improvement loop: select a parent, let the meta agent change it, evaluate, keep.

One generation, as DESIGN.md describes it:

1. select a parent among the archive's valid, scored nodes (a named strategy, or the workspace's own
   `select_next_parent.py` with --edit_select_parent);
2. check out the parent's commit into a plain folder (no git metadata);
3. run the meta agent in a sandbox on it, through the gateway, with the train split and earlier train
   results read-only and a command to try the task agent;
4. read the folder back as data (regular files of the evolvable paths, within a quota) and commit it;
   an empty diff is a `no_change` node;
5. import the new TaskAgent and MetaAgent in the sandbox;
6. staged, then full evaluation (optimizer.evaluation);
7. record the node atomically.

What a sandbox may write goes to `untrusted/<node>/`; the node's records (node.json, patch.diff, logs)
are written by the core alone, in `nodes/<node>/`, where no sandbox can write.

Every step leaves a trace in `archive.jsonl` before the next starts, so a run killed anywhere resumes
with `--resume_from`: finished nodes stay, the meta agent's committed change is not asked for again,
evaluations continue from their journals.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from archive.promotion import row_scores
from archive.records import GenStart, Node, Status
from archive.run_state import RunState
from archive.store import Archive, untrusted_dir
from optimizer.beginning import Beginnings
from optimizer.cost_tally import CostTally
from optimizer.evaluation import BudgetStop, Evaluator, LoadFailed, NodeSandbox, Peers
from optimizer.events import (
    CostBooked,
    Draw,
    Event,
    Events,
    FinalTested,
    GenerationStarted,
    MetaFinished,
    NodeFinished,
    Pictures,
    RunEnded,
    RunStarted,
    SplitStarted,
    Warned,
    console,
)
from optimizer.feedback import publish_feedback, write_train_data
from optimizer.heldout import HeldOut
from optimizer.initial_agents import replays_demo
from optimizer.meta_step import MetaStep
from optimizer.racing import race_targets
from optimizer.screening import Screen
from optimizer.slots import Slots, horizon, run_generation
from optimizer.trackers import Trackers
from services.choices import InitialEval
from services.sandbox import SandboxClosed
from services.workspace import RunRepo, discard
from services.write_failures import write_failure

if TYPE_CHECKING:
    from optimizer.context import RunContext


class RunArchive(Archive):
    """The run's archive as its slots read it: the generations to redo stop at `last` (loop.max_generation),
    so one that a resume lowered it below stays started, for a resume that raises it again."""

    last: int | None = None

    def pending_generations(self) -> list[GenStart]:
        return [s for s in super().pending_generations() if self.last is None or s.generation <= self.last]


class Loop:
    """The order of a run's steps; what each step does is its collaborator's (beginnings, meta step, screen,
    evaluator), and what the run is, its context's."""

    def __init__(self, ctx: RunContext, events: Events | None = None, draw: Draw | None = None) -> None:
        self.ctx = ctx
        archive = RunArchive(ctx.run_dir)
        archive.last = ctx.loop.max_generation
        self.archive: Archive = archive
        self.repo = RunRepo(ctx.run_dir / "repo")
        self.events = events or Events(console)
        self.evaluator = Evaluator(ctx, self.events)
        self.beginnings = Beginnings(ctx, archive, self.repo, self.events)
        self.meta = MetaStep(ctx, archive, self.repo)
        self.screen = Screen(ctx, archive)
        ctx.gateway.allow_models(*ctx.meta_models, ctx.task_model)
        self.events.subscribe(CostTally(ctx, self.evaluator.store, self.events))  # after the task model's price
        if ctx.config.models.heldout_grader:  # the best nodes' proofs graded again, before the pictures draw them
            self.events.subscribe(HeldOut(ctx, archive, self.events, self.evaluator))
        self.pictures = Pictures(archive, ctx.domains, ctx.full_sizes, ctx.run_dir, self.events, ctx.best_choice,
                                 ctx.score_rule, ctx.loop.pictures_every_s, draw)
        self.events.subscribe(self.pictures, on_wait=self.pictures.catch_up)
        self.events.subscribe(Trackers(ctx.run_dir, ctx.config, archive, self.best, self.events))
        self.events.subscribe(self._log_split_start)
        write_train_data(ctx.run_dir, ctx.domains)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> None:
        """The run, from what is on disk; the event log says when a process ran it (for the dashboard)."""
        self.archive.log("run_start", pid=os.getpid(), host=socket.gethostname())
        self.events.emit(RunStarted(str(self.ctx.run_dir)))
        state, why = RunState.STOPPED, None
        try:
            self._run()
            state = RunState.STOPPED if (why := self.ctx.gateway.budget_left_message()) else RunState.FINISHED
        except BaseException as e:
            why = ("Ctrl-C" if isinstance(e, KeyboardInterrupt) else getattr(e, "why", None)  # a time limit's
                   or f"{type(e).__name__}: {str(e)[:200]}")
            raise
        finally:
            self.archive.log("run_end", state=str(state), **({"why": why} if why else {}))
            self.pictures.draw()  # the report drawn with the last node said "running"
            self.events.emit(RunEnded(str(state), why))

    def _run(self) -> None:
        for leftover in (self.ctx.workspaces, self.ctx.run_dir / "worktrees"):  # of a killed run (or an older layout)
            discard(leftover)
        self.archive.reopen_unfinished()
        if "initial" not in self.archive.nodes:
            start = GenStart("initial", None, 0)
            self.archive.log_start(start)
            node = run_generation(self, start)
            self.archive.record(node)
            self.events.emit(NodeFinished(node))
            if node.status in (Status.BUDGET_STOPPED, Status.LOST):
                return
        loop = self.ctx.loop
        Slots(self, loop.parallel, loop.replayable).run()
        if loop.final_test and not self.ctx.gateway.budget_left_message():
            self._final_test()

    def _final_test(self) -> None:
        from optimizer.final_test import final_test_lines, run_final_test

        try:
            path = run_final_test(self)
        except (BudgetStop, LoadFailed) as e:
            self.events.emit(Warned(f"final test not done: {e}"))
            return
        for line in final_test_lines(path) if path else ["final test: no domain of the run has a test split"]:
            self.events.emit(Warned(line) if line.startswith("final test: no") else FinalTested(line))

    def _log_split_start(self, event: Event) -> None:
        """An evaluation as it begins, into the event log: what a watcher of the run (the dashboard)
        reads to show its rows coming in."""
        if isinstance(event, SplitStarted):
            self.archive.log("split_start", node_id=event.node_id, domain=event.domain, split=event.split,
                             rows=event.rows, key=event.key)

    # -- one generation -------------------------------------------------------------------
    def begin(self, generation: int, upto: int | None = None) -> GenStart:
        """How `generation` starts (optimizer/beginning.py), from the nodes of generations up to `upto`."""
        return self.beginnings.start(generation, upto)

    def generation(self, start: GenStart) -> Node:
        """One generation: the meta agent's change to its parent, then its evaluation (the initial node's only)."""
        node_id, parent, generation = start.node_id, start.parent, start.generation
        ctx, loop = self.ctx, self.ctx.loop
        meta_model = start.meta_model or ctx.meta_model
        started = time.monotonic()
        if parent is None:  # loop.initial_eval stage: the first stage's rows only, as the reference's setup_initial.sh
            node = self._evaluate_new(Node(node_id, None, generation, commit=self.repo.node_commit(node_id)),
                                      first_stage_only=loop.initial_eval == InitialEval.STAGE)
            return self._finished(node, started)
        done = self.archive.meta_result(node_id)
        if done is None:
            named = meta_model if len(ctx.meta_models) > 1 else ""
            self.events.emit(GenerationStarted(node_id, parent, generation, loop.meta_timeout_s, loop.meta_max_calls,
                                               named, replays_demo(ctx.config)))
            done = self.meta.run(node_id, self.repo.node_commit(parent), generation, meta_model, start.other_parent)
            if done.status != Status.BUDGET_STOPPED:  # a run the budget cut short is run again on resume
                self.archive.log_meta_result(node_id, done)
            self.events.emit(MetaFinished(node_id, done))
        node = Node(node_id, parent, generation, commit=done.commit, patch=done.patch,
                    seconds={"meta": done.seconds}, flags=self.screen.tamper_flags(node_id, done.patch),
                    meta_model=meta_model, parents=[parent, start.other_parent] if start.other_parent else [])
        if done.status != Status.OK:
            # Never evaluated, whatever half-change the run left (the reference's run_meta_agent.py
            # writes its diff only once forward() returned); under loop.meta_failure parent its
            # parent stops being chosen too (Archive.candidates).
            node.status, node.error = done.status, done.error
        elif done.commit is None:
            node.status, node.error = Status.NO_CHANGE, done.error
        elif duplicate := self.screen.duplicate_of(node):
            node.status, node.error = Status.DUPLICATE, duplicate
        else:
            node = self._evaluate_new(node)
        return self._finished(node, started)

    def _finished(self, node: Node, started: float) -> Node:
        """The node's wall time, costs and published feedback, once its generation is over."""
        node.seconds["total"] = round(time.monotonic() - started, 3)
        self._book_costs(node)
        publish_feedback(self.ctx.run_dir, self.ctx.domains, self.evaluator.store, node, self.ctx.config)
        return node

    def node_sandbox(self, node_id: str) -> NodeSandbox:
        return self.evaluator.node_sandbox(node_id, self.archive.node_dir(node_id),
                                           untrusted_dir(self.ctx.run_dir, node_id, "agent_evals"),
                                           self.entry_points())

    def _evaluate_new(self, node: Node, first_stage_only: bool = False) -> Node:
        """Evaluate the committed change of `node` and fill in its scores or why it has none."""
        assert node.commit, f"node {node.node_id} is evaluated once committed"
        try:
            with self.node_sandbox(node.node_id) as box:
                box.fill(self.repo, node.commit)
                results = self.evaluator.evaluate(self.ctx.domains, box, self._evaluated_as(node), node.seconds,
                                                  self._peers(node.parent, node.generation), first_stage_only)
        except LoadFailed as e:
            node.status, node.error = Status.LOAD_FAILED, str(e)[:500]
            return node
        except BudgetStop as e:
            node.status, node.error = Status.BUDGET_STOPPED, str(e)
            return node
        except SandboxClosed:
            raise  # the host stopped it (Ctrl-C): no result, the generation is redone on resume
        except Exception as e:  # one node's evaluation never ends the run; this machine's failure does
            if isinstance(e, OSError) and (down := write_failure(e, e.filename or self.ctx.run_dir)) is not None:
                raise down from e  # a workspace the disk could not hold is no failure of the node's
            node.status, node.error = Status.EVAL_FAILED, f"{type(e).__name__}: {e}"[:500]
            return node
        for name, result in results.items():
            node.set_evaluations(name, {s: r.record() for s, r in result.splits.items()})
            node.full_eval[name] = result.full
            if result.screening:
                node.screening[name] = result.screening
        notes = [f"{name}/{s}: {r.note}" for name, res in results.items() for s, r in res.splits.items() if r.note]
        node.error = "; ".join(notes)[:1000] or None  # a split the task agent raised on (loop.row_error invalid)
        node.raced_out = next((r.raced_out for r in results.values() if r.raced_out), None)  # search/racing.py
        return node

    def _evaluated_as(self, node: Node) -> str:
        """What the node's evaluations are kept under (archive/eval_store.py's key): its task agent's code,
        shared with every node of the same code under loop.reuse_evaluations, else its own (the node's id
        too), so each node is evaluated anew as in the reference, and a resumed evaluation still finds
        its journal."""
        assert node.commit is not None, f"node {node.node_id} has no commit"  # evaluated nodes have one
        code = self.repo.task_agent_hash(node.commit)
        return code if self.ctx.loop.reuse_evaluations else f"{code}/node/{node.node_id}"

    def _peers(self, parent_id: str | None, generation: int) -> Peers:
        """The train rows and scores a child's screening and race compare with: its parent's and the best's."""
        best = self.best(horizon(generation, self.ctx.loop.parallel, self.ctx.loop.replayable))
        parent = self.archive.nodes.get(parent_id or "")
        peers = Peers(best_node=best.node_id if best else None, **race_targets(self.ctx, best, parent))
        for d in self.ctx.domains:
            for found, node in ((peers.parent, parent), (peers.best, best)):
                key = node.eval_key(d.name, "train") if node else None
                report = self.evaluator.store.report(key) if key else None
                found[d.name] = row_scores(report, d.score_key) if report else None
        return peers

    def entry_points(self) -> list[str]:
        """What must import, besides TaskAgent, for a node to count (checked in the sandbox)."""
        return ["meta_agent:MetaAgent"] + (["select_next_parent:select_next_parent"]
                                           if self.ctx.loop.edit_select_parent else [])

    def _book_costs(self, node: Node) -> None:
        ledger, run_id = self.ctx.gateway.ledger, self.ctx.gateway.run_id
        for role in ledger.roles(run_id=run_id, node=node.node_id):  # every role that made calls for the node
            spent = ledger.totals(run_id=run_id, node=node.node_id, role=role)
            if spent.calls:
                node.cost_usd[role] = round(spent.cost_usd, 6)
                node.tokens[role] = spent.tokens
                self.events.emit(CostBooked(node.node_id, role, node.cost_usd[role], spent.tokens, spent.cached_tokens,
                                            spent.cache_saved_usd))

    def best(self, upto: int | None = None) -> Node | None:
        return self.ctx.best(self.archive, upto)
