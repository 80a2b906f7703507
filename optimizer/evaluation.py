"""Staged evaluation of a node, with content-addressed results.

Stage 1 runs each domain's train split on its first `staged_eval_samples` rows; only
if every domain scores above 0 does the full evaluation run (grading: train and val;
proofs: all problems; test too with --eval_test). Each (task-agent code, model,
domain, split, rows) gets a folder under `evals/` named by a hash of those: a task
agent that did not change is never paid for twice, and an evaluation a kill
interrupted resumes from its journal. The full train run starts from the staged
run's rows, which are its first rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.errors import UserError
from services.fsutil import atomic_write_json
from services.workspace import discard


@dataclass
class SplitResult:
    score: float | None
    rows: int
    key: str


@dataclass
class DomainResult:
    splits: dict[str, SplitResult] = field(default_factory=dict)
    full: bool = False


class BudgetStop(Exception):
    """The run's budget ran out during an evaluation."""


class LoadFailed(Exception):
    """The node's task agent, or another entry point it must have, does not import."""


def eval_key(agent_hash: str, domain: str, split: str, rows: int, model: str) -> str:
    text = json.dumps([agent_hash, domain, split, rows, model])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def split_rows(domain, split: str, limit: int) -> int:
    """How many rows an evaluation of `split` with `limit` (-1 = all) covers."""
    total = len(domain.load(split))
    return total if limit < 0 else min(limit, total)


class Evaluator:
    def __init__(self, run_dir: Path, config, gateway, backend: str, task_model: str):
        self.run_dir = run_dir
        self.evals_dir = run_dir / "evals"
        self.config = config
        self.gateway = gateway
        self.backend = backend
        self.task_model = task_model

    def full_splits(self, domain) -> list[str]:
        wanted = ["train", "val"] + (["test"] if self.config.loop.eval_test else [])
        return [s for s in wanted if s in domain.splits]

    def node_sandbox(self, node_id: str, node_dir: Path, transcripts: Path,
                     check_imports: list[str] = ()) -> "NodeSandbox":
        """A node's evaluation sandbox, to open before its files exist (see NodeSandbox); its worker
        writes transcripts to `transcripts` and nothing else, its log goes to `node_dir`."""
        workspace = self.run_dir / "workspaces" / f"{node_id}-eval"
        return NodeSandbox(self, workspace, node_id, node_dir, transcripts, list(check_imports))

    def evaluate(self, domains: list, node: "NodeSandbox", agent_hash: str,
                 timings: dict | None = None) -> dict[str, DomainResult]:
        """Staged, then full evaluation of every domain; raises BudgetStop when the money runs out
        and LoadFailed when the task agent or one of the node's entry points does not load.

        Every split runs through the node's one worker, whose loading of the agent is the load
        check (timed as "check" in `timings`); evaluations already done are reused as they are.
        """
        results = {d.name: DomainResult() for d in domains}
        timings = timings if timings is not None else {}
        started = time.monotonic()
        try:
            node.worker.start()
        except UserError as e:
            raise LoadFailed(str(e)) from None
        finally:
            timings["check"] = round(time.monotonic() - started, 3)
        started = time.monotonic()

        def run(d, split: str, limit: int) -> None:
            results[d.name].splits[split] = self._split(d, split, split_rows(d, split, limit), node, agent_hash)

        if not self.config.loop.skip_staged_eval:
            for d in domains:
                run(d, "train", d.staged_eval_samples)
            if any((r.splits["train"].score or 0) <= 0 for r in results.values()):
                timings["eval"] = round(time.monotonic() - started, 3)
                return results
        for d in domains:
            for split in self.full_splits(d):
                run(d, split, self.config.loop.eval_samples)
            results[d.name].full = True
        timings["eval"] = round(time.monotonic() - started, 3)
        return results

    def _split(self, domain, split: str, rows: int, node: "NodeSandbox", agent_hash: str) -> SplitResult:
        from domains.harness import harness

        key = eval_key(agent_hash, domain.name, split, rows, self.task_model)
        folder = self.evals_dir / key
        report_path = folder / "report.json"
        if report_path.exists():
            return SplitResult(json.loads(report_path.read_text()).get(domain.score_key), rows, key)
        self._seed_from_smaller(folder, agent_hash, domain.name, split, rows)
        try:
            harness(domain=domain.name, subset=split, num_samples=rows, output_dir=str(self.evals_dir), run_id=key,
                    resume_from=str(folder) if (folder / "predictions.jsonl").exists() else None,
                    model=self.task_model, config=self.config, gateway=self.gateway, node=node.node_id,
                    workspace=node.workspace, sandbox=self.backend, agent_worker=node.worker,
                    show_progress=True)
        except UserError as e:
            if self.gateway.budget_left_message():
                raise BudgetStop(str(e)) from None
            raise
        report = self._score(domain, folder, node.node_id)
        atomic_write_json(report_path, report)
        return SplitResult(report.get(domain.score_key), rows, key)

    def _seed_from_smaller(self, folder: Path, agent_hash: str, domain: str, split: str, rows: int) -> None:
        """Start a full run from the staged run's journal: same agent, same first rows."""
        if folder.exists() or split != "train":
            return
        from domains.registry import get_domain

        staged = self.evals_dir / eval_key(agent_hash, domain, split, get_domain(domain).staged_eval_samples,
                                           self.task_model)
        if (staged / "predictions.jsonl").exists():
            folder.mkdir(parents=True)
            shutil.copy2(staged / "predictions.jsonl", folder / "predictions.jsonl")

    def _score(self, domain, folder: Path, node_id: str) -> dict:
        """The domain's metrics; predictions that need grading are graded first, outside
        the workspace, by the installed grader (role grader)."""
        from domains.harness import harness
        from domains.registry import get_domain
        from domains.report import score_predictions

        if not domain.graded_by:
            from domains.judge import GatewayJudge

            judge = GatewayJudge(self.config, gateway=self.gateway, node=node_id) if domain.uses_judge else None
            return score_predictions(domain, folder / "predictions.csv", judge)
        graded = get_domain(domain.graded_by)
        gradings = folder / "gradings"
        harness(domain=graded.name, agent_path=domain.grader_agent, proofs_dname=str(folder), output_dir=str(folder),
                run_id="gradings", resume_from=str(gradings) if (gradings / "predictions.jsonl").exists() else None,
                model=self.config.resolve_model(graded.model_role), config=self.config, gateway=self.gateway,
                node=node_id, sandbox=self.backend, show_progress=True)
        return score_predictions(graded, gradings / "predictions.csv")


class NodeSandbox:
    """A node's evaluation workspace, its sandbox and its task-agent worker.

    Entered before the node's files exist: the worker starts at once and pays its imports
    (litellm: ~2 s) while the meta agent is still writing the code, and loads the agent
    only when `Evaluator.evaluate` asks. `fill` puts the files of a commit in place.
    The workspace holds the files only, without git metadata, and is removed on exit.
    """

    def __init__(self, evaluator: Evaluator, workspace: Path, node_id: str, node_dir: Path, transcripts: Path,
                 check_imports: list[str]):
        self.evaluator = evaluator
        self.workspace = workspace
        self.node_id = node_id
        self.node_dir = node_dir
        self.check_imports = check_imports
        self.transcripts = transcripts
        self._stack = contextlib.ExitStack()
        self.box = self.worker = None

    def __enter__(self) -> "NodeSandbox":
        from domains.harness import AgentWorker, worker_mounts
        from services.sandbox import open_sandbox

        ev = self.evaluator
        discard(self.workspace)  # left by a killed run
        self.workspace.mkdir(parents=True)
        self._stack.callback(shutil.rmtree, self.workspace, ignore_errors=True)
        try:
            self.transcripts.mkdir(parents=True, exist_ok=True)
            self.box = self._stack.enter_context(open_sandbox(ev.config.sandbox, self.workspace,
                                                              worker_mounts(self.transcripts), ev.gateway.unix_socket,
                                                              ev.backend))
            self.worker = AgentWorker(self.box, "task_agent", ev.task_model, ev.config, ev.gateway, self.node_id,
                                      "task", self.transcripts, self.node_dir / "worker.log",
                                      also_import=self.check_imports)
            self._stack.callback(self.worker.stop)
            self.worker.prestart()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def fill(self, repo, commit: str) -> None:
        """The files of `commit` into the (empty) workspace, owned as the sandbox needs."""
        repo.export(commit, self.workspace)
        self.box.adopt(self.workspace)
