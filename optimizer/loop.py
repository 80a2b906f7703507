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
import random
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from archive.novelty import first_duplicate
from archive.promotion import BestChoice, row_scores
from archive.records import GenStart, MetaResult, Node, Status
from archive.run_state import RunState
from archive.store import META_TRANSCRIPT, Archive, ScoreRule, untrusted_dir
from archive.tamper import NOT_SCREENED, read_text
from archive.tamper import flags as tamper_flags
from archive.text_pass import TooLarge
from optimizer.beginning import choose_meta_model, choose_parent, choose_partner
from optimizer.evaluation import BudgetStop, Evaluator, LoadFailed, NodeSandbox, Peers, split_rows
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
from optimizer.feedback import TRY_ROWS, publish_feedback, write_train_data
from optimizer.heldout import HeldOut
from optimizer.initial_agents import replays_demo
from optimizer.meta_outcome import META_LOG, meta_log, meta_result
from optimizer.slots import Slots, horizon, run_generation
from optimizer.trackers import Trackers
from search.registry import novelty_measure
from services.choices import InitialEval
from services.config import Baseline, Config
from services.fsutil import atomic_write_text, make_folder
from services.sandbox import Mount, Sandbox, SandboxClosed, open_sandbox
from services.workspace import Quota, RunRepo, discard
from services.write_failures import write_failure

if TYPE_CHECKING:
    from domains.base import Domain
    from services.gateway import Gateway

FEEDBACK = "/feedback"  # earlier generations' train results, read-only inside
DATA = "/data"  # train rows with labels, read-only inside
NODE_OUT = "/out/node"  # the node's sandbox output folder (transcript), writable inside
FROZEN_META = "/opt/frozen_meta"  # baseline no_selfimprove: the initial agent code the meta agent runs from
OTHER_PARENT = "/other_parent"  # a merge's second parent's code, read-only inside


class RunArchive(Archive):
    """The run's archive as its slots read it: the generations to redo stop at `last` (loop.max_generation),
    so one that a resume lowered it below stays started, for a resume that raises it again."""

    last: int | None = None

    def pending_generations(self) -> list[GenStart]:
        return [s for s in super().pending_generations() if self.last is None or s.generation <= self.last]


class Loop:
    def __init__(self, run_dir: Path, config: Config, domains: list[Domain], gateway: Gateway, backend: str,
                 events: Events | None = None, draw: Draw | None = None) -> None:
        self.run_dir, self.config, self.domains, self.gateway, self.backend = run_dir, config, domains, gateway, backend
        archive = RunArchive(run_dir)
        archive.last = config.loop.max_generation
        self.archive: Archive = archive  # as the protocols read it (Begins, Graders)
        self.repo = RunRepo(run_dir / "repo")
        self.workspaces = run_dir / "workspaces"  # plain folders of agent code, one per sandbox
        loop = config.loop
        self.quota = Quota(int(loop.workspace_file_mb * 2**20), int(loop.workspace_total_mb * 2**20))
        self.task_model, self.meta_model = config.resolve_model("task"), config.resolve_model("meta")
        self.meta_models = config.meta_models()  # the bandit's arms (one: no bandit)
        self.events = events or Events(console)
        self.evaluator = Evaluator(run_dir, config, gateway, backend, self.task_model, self.events)
        gateway.allow_models(*self.meta_models, self.task_model)
        self.full_sizes = {d.name: split_rows(d, d.selection_split, config.loop.eval_samples) for d in domains}
        self.score_rule = ScoreRule.of(config.loop, domains)
        self.rng = random.Random()  # parent selection without a seed (with one, see choose_parent)
        self._changes: dict[str, object] = {}  # node id -> its patch's changed lines, as compared (novelty screening)
        if config.models.heldout_grader:  # the best nodes' proofs graded again, before the pictures draw them
            self.events.subscribe(HeldOut(self))
        self.pictures = Pictures(self.archive, domains, self.full_sizes, run_dir, self.events,
                                 BestChoice.of(config.loop), self.score_rule, config.loop.pictures_every_s, draw)
        self.events.subscribe(self.pictures, on_wait=self.pictures.catch_up)
        self.events.subscribe(Trackers(run_dir, config, self.archive, self.best, self.events))
        self.events.subscribe(self._log_split_start)
        write_train_data(run_dir, domains)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> None:
        """The run, from what is on disk; the event log says when a process ran it (for the dashboard)."""
        self.archive.log("run_start", pid=os.getpid(), host=socket.gethostname())
        self.events.emit(RunStarted(str(self.run_dir)))
        state, why = RunState.STOPPED, None
        try:
            self._run()
            state = RunState.STOPPED if (why := self.gateway.budget_left_message()) else RunState.FINISHED
        except BaseException as e:
            why = ("Ctrl-C" if isinstance(e, KeyboardInterrupt) else getattr(e, "why", None)  # a time limit's
                   or f"{type(e).__name__}: {str(e)[:200]}")
            raise
        finally:
            self.archive.log("run_end", state=str(state), **({"why": why} if why else {}))
            self.pictures.draw()  # the report drawn with the last node said "running"
            self.events.emit(RunEnded(str(state), why))

    def _run(self) -> None:
        for leftover in (self.workspaces, self.run_dir / "worktrees"):  # of a killed run (or an older layout)
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
        loop = self.config.loop
        Slots(self, loop.parallel, loop.replayable).run()
        if loop.final_test and not self.gateway.budget_left_message():
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
        """How `generation` starts: its parent and the model its meta agent runs on, chosen among
        the nodes of generations up to `upto` (all when None); optimizer/beginning.py."""
        parent = choose_parent(self, generation, upto)
        return GenStart(str(generation), parent, generation, choose_meta_model(self, generation, upto),
                        choose_partner(self, generation, upto, parent))

    def generation(self, start: GenStart) -> Node:
        """One generation: the meta agent's change to its parent, then its evaluation; the initial
        node (no parent) is only evaluated."""
        node_id, parent, generation = start.node_id, start.parent, start.generation
        meta_model = start.meta_model or self.meta_model
        started = time.monotonic()
        if parent is None:  # loop.initial_eval stage: the first stage's rows only, as the reference's setup_initial.sh
            node = self._evaluate_new(Node(node_id, None, generation, commit=self.repo.node_commit(node_id)),
                                      first_stage_only=self.config.loop.initial_eval == InitialEval.STAGE)
            return self._finished(node, started)
        parent_commit = self.repo.node_commit(parent)
        done = self.archive.meta_result(node_id)
        if done is None:
            loop, named = self.config.loop, meta_model if len(self.meta_models) > 1 else ""
            self.events.emit(GenerationStarted(node_id, parent, generation, loop.meta_timeout_s, loop.meta_max_calls,
                                               named, replays_demo(self.config)))
            done = self.run_meta_agent(node_id, parent_commit, generation, meta_model, start.other_parent)
            self.archive.log_meta_result(node_id, done)
            self.events.emit(MetaFinished(node_id, done))
        node = Node(node_id, parent, generation, commit=done.commit, patch=done.patch,
                    seconds={"meta": done.seconds}, flags=self._tamper_flags(node_id, done.patch),
                    meta_model=meta_model, parents=[parent, start.other_parent] if start.other_parent else [])
        if done.status != Status.OK:
            # Never evaluated, whatever half-change the run left (the reference's run_meta_agent.py
            # writes its diff only once forward() returned); under loop.meta_failure parent its
            # parent stops being chosen too (Archive.candidates).
            node.status, node.error = done.status, done.error
        elif done.commit is None:
            node.status, node.error = Status.NO_CHANGE, done.error
        else:
            duplicate = self._duplicate_of(node)
            if duplicate:
                node.status, node.error = Status.DUPLICATE, duplicate
            else:
                node = self._evaluate_new(node)
        return self._finished(node, started)

    def _tamper_flags(self, node_id: str, patch: dict) -> list[str]:
        """Why the node's change or its meta agent's commands reach for the scoring side (archive/tamper.py)."""
        unread: list[str] = []  # what was too large to read whole: the node says it was not screened
        hidden = list(dict.fromkeys(c for d in self.domains for c in d.hidden_columns))
        transcript = read_text(self.sandbox_out(node_id, "meta"), META_TRANSCRIPT, "its meta transcript", unread)
        return tamper_flags(read_text(self.run_dir / "nodes", f"{node_id}/patch.diff", "its change", unread),
                            [str(f) for f in patch.get("dropped") or []], hidden, transcript, unread)

    def _duplicate_of(self, node: Node) -> str | None:
        """Why `node` is not worth evaluating under loop.novelty_threshold (its change nearly repeats an
        earlier node's), or None. It is compared with the nodes its generation could choose a parent
        from, so a replayed run screens the same; a comparison past its deadline is a flag instead."""
        threshold = self.config.loop.novelty_threshold
        if threshold is None:
            return None
        upto = horizon(node.generation, self.config.loop.parallel, self.config.loop.replayable)
        earlier = [n.node_id for n in self.archive.ordered()
                   if n.node_id != node.node_id and (upto is None or n.generation <= upto)]
        try:
            found = first_duplicate(self.run_dir / "nodes", node.node_id, earlier, self._changes, threshold,
                                    novelty_measure(self.config.loop.novelty_measure))
        except TooLarge as e:
            node.flags.insert(0, f"{NOT_SCREENED} ({e.why})")
            return None
        if found is None:
            return None
        return (f"its change is {found[1]:.2f} alike to node {found[0]}'s (loop.novelty_threshold "
                f"{threshold:g}): not evaluated")

    def _finished(self, node: Node, started: float) -> Node:
        """The node's wall time, costs and published feedback, once its generation is over."""
        node.seconds["total"] = round(time.monotonic() - started, 3)
        self._book_costs(node)
        publish_feedback(self.run_dir, self.domains, self.evaluator.store, node, self.config)
        return node

    def sandbox_out(self, node_id: str, part: str) -> Path:
        return untrusted_dir(self.run_dir, node_id, part)

    def node_sandbox(self, node_id: str) -> NodeSandbox:
        return self.evaluator.node_sandbox(node_id, self.archive.node_dir(node_id),
                                           self.sandbox_out(node_id, "agent_evals"), self.entry_points())

    def run_meta_agent(self, node_id: str, parent_commit: str, generation: int, meta_model: str,
                       other: str | None = None) -> MetaResult:
        records = self.archive.node_dir(node_id)
        workspace = self.repo.checkout(parent_commit, self.workspaces / node_id)
        mounts = self._meta_mounts(self.sandbox_out(node_id, "meta"))
        extra = []  # read-only checkouts beside the workspace, removed after the run
        if self.config.loop.run_baseline == Baseline.NO_SELFIMPROVE:
            # The meta agent (its code and the shared agent/ it imports) stays the initial one;
            # it still edits the whole workspace.
            extra.append(Mount(self.repo.checkout(self.repo.node_commit("initial"),
                                                  self.workspaces / f"{node_id}-frozen_meta"), FROZEN_META))
        if other is not None:  # a merge: the second parent's code, to read
            extra.append(Mount(self.repo.checkout(self.repo.node_commit(other), self.workspaces / f"{node_id}-other"),
                               OTHER_PARENT))
        started = time.monotonic()
        try:
            with open_sandbox(self.config.sandbox, workspace, mounts + extra, self.gateway.unix_socket,
                              self.backend) as box:
                argv = self._meta_argv(box, generation, any(m.target == FROZEN_META for m in extra), meta_model)
                argv += ["--other_parent", OTHER_PARENT, "--other_node", other] if other is not None else []
                env = self._agent_env(box, node_id, meta_model)
                result = box.run(argv, env, timeout=self.config.loop.meta_timeout_s)
        finally:
            for mount in extra:
                discard(mount.source)
        atomic_write_text(records / META_LOG, meta_log(result.stdout, result.stderr))
        seconds = round(time.monotonic() - started, 3)
        try:
            capture = self.repo.capture(workspace, parent_commit, node_id, self.quota)
        finally:
            discard(workspace)
        atomic_write_text(records / "patch.diff", capture.patch)
        patch = {"files": capture.files, "insertions": capture.insertions, "deletions": capture.deletions,
                 "dropped": capture.dropped, "dropped_why": capture.dropped_why,
                 **({"bidi": capture.bidi} if capture.bidi else {})}  # shown as a warning (Trojan Source)
        # ProviderDown when the provider failed it: nothing is recorded, the generation is redone on resume.
        return meta_result(self.gateway, env["AGENT_GATEWAY_KEY"], result, capture.commit, patch, seconds,
                           self.config.loop.meta_failure)

    def _meta_argv(self, box: Sandbox, generation: int, frozen: bool, meta_model: str) -> list[str]:
        argv = [box.python, box.trusted_script("run_meta.py"), "--repo", box.workdir, "--eval_path", FEEDBACK,
                "--iterations_left", str(self.config.loop.max_generation - generation), "--model", meta_model,
                "--transcript", f"{NODE_OUT}/{META_TRANSCRIPT}",
                "--max_tool_calls", str(self.config.loop.meta_max_calls)]
        if self.config.loop.try_command:
            argv += ["--try_command", f"python {box.trusted_script('try_agent.py')} --rows {TRY_ROWS}"]
        return argv + (["--agent_root", FROZEN_META] if frozen else [])

    def _evaluate_new(self, node: Node, first_stage_only: bool = False) -> Node:
        """Evaluate the committed change of `node` and fill in its scores or why it has none."""
        assert node.commit, f"node {node.node_id} is evaluated once committed"
        try:
            with self.node_sandbox(node.node_id) as box:
                box.fill(self.repo, node.commit)
                results = self.evaluator.evaluate(self.domains, box, self._evaluated_as(node), node.seconds,
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
            if isinstance(e, OSError) and (down := write_failure(e, e.filename or self.run_dir)) is not None:
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
        return node

    def _evaluated_as(self, node: Node) -> str:
        """What the node's evaluations are kept under (archive/eval_store.py's key): its task agent's code,
        shared with every node of the same code under loop.reuse_evaluations, else its own (the node's id
        too), so each node is evaluated anew as in the reference, and a resumed evaluation still finds
        its journal."""
        assert node.commit is not None, f"node {node.node_id} has no commit"  # evaluated nodes have one
        code = self.repo.task_agent_hash(node.commit)
        return code if self.config.loop.reuse_evaluations else f"{code}/node/{node.node_id}"

    def _peers(self, parent_id: str | None, generation: int) -> Peers:
        """The train row scores a child's screening compares with: its parent's and the best node's
        among those its generation chose its parent from."""
        best = self.best(horizon(generation, self.config.loop.parallel, self.config.loop.replayable))
        peers = Peers(best_node=best.node_id if best else None)
        for d in self.domains:
            for found, node in ((peers.parent, self.archive.nodes.get(parent_id or "")), (peers.best, best)):
                key = node.eval_key(d.name, "train") if node else None
                report = self.evaluator.store.report(key) if key else None
                found[d.name] = row_scores(report, d.score_key) if report else None
        return peers

    def entry_points(self) -> list[str]:
        """What must import, besides TaskAgent, for a node to count (checked in the sandbox)."""
        return ["meta_agent:MetaAgent"] + (["select_next_parent:select_next_parent"]
                                           if self.config.loop.edit_select_parent else [])

    # -- what the sandbox sees ------------------------------------------------------------
    def _meta_mounts(self, out: Path) -> list[Mount]:
        feedback = self.run_dir / "feedback"
        make_folder(feedback)
        return [Mount(self.run_dir / "train_data", DATA),
                Mount(feedback, FEEDBACK),
                Mount(out, NODE_OUT, writable=True)]

    def _agent_env(self, box: Sandbox, node_id: str, meta_model: str) -> dict:
        from domains.harness import worker_env

        # Each key calls its role's model only, while `box` is open (services/gateway/sessions.py).
        meta_key = self.gateway.new_session(node_id, "meta", [meta_model], self.config.loop.meta_max_calls, box)
        # The try command's calls are the task agent's, made for the meta agent: booked apart, capped.
        try_key = self.gateway.new_session(node_id, "try", [self.task_model], self.config.loop.try_max_calls, box)
        env = worker_env(box, box.gateway_url or self.gateway.url, meta_key, (meta_model, self.task_model))
        env.update(TRY_GATEWAY_KEY=try_key, TRY_MODEL=self.task_model, WORKSPACE=box.workdir,
                   PYTHONPATH=box.workdir)
        return env

    def _book_costs(self, node: Node) -> None:
        ledger, run_id = self.gateway.ledger, self.gateway.run_id
        for role in ledger.roles(run_id=run_id, node=node.node_id):  # every role that made calls for the node
            spent = ledger.totals(run_id=run_id, node=node.node_id, role=role)
            if spent.calls:
                node.cost_usd[role] = round(spent.cost_usd, 6)
                node.tokens[role] = spent.tokens
                self.events.emit(CostBooked(node.node_id, role, node.cost_usd[role], spent.tokens, spent.cached_tokens,
                                            spent.cache_saved_usd))

    def best(self, upto: int | None = None) -> Node | None:
        return self.archive.best(self.domains, self.full_sizes, BestChoice.of(self.config.loop), upto,
                                 self.score_rule)
