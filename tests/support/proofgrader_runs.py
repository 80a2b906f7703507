"""For setup_proofgrader_repo's tests: its command, and run folders with the chosen nodes' code."""

import json
import os
import subprocess
import sys
from pathlib import Path

from support.cli import REPO_ROOT


def baseline_proofgrader(root: Path) -> Path:
    """A proofgrader package built from the ProofAutoGrader baseline on the fake provider's model, under
    `root`; importable with it on PYTHONPATH."""
    r = subprocess.run([sys.executable, "-m", "setup_proofgrader_repo", "--proofautograder", "--model",
                        "openai/fake", "--dst", str(root / "proofgrader_repo")], capture_output=True, text=True,
                       timeout=300, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    return root / "proofgrader_repo"


def setup_repo(*args, cwd: Path):
    """`python -m setup_proofgrader_repo ARGS` in `cwd`; the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "setup_proofgrader_repo", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


class SyntheticRun:
    """A run folder as the loop leaves it: run.json, the git repository, node records, eval reports."""

    def __init__(self, root: Path, model: str = "openai/fake-task"):
        from archive.store import Archive
        from services.workspace import RunRepo

        self.dir = root / "run"
        self.dir.mkdir(parents=True)
        (self.dir / "run.json").write_text(json.dumps({"domains": ["imo_grading"],
                                                       "config": {"models": {"task": model}}}))
        self.repo = RunRepo.create(self.dir / "repo", REPO_ROOT)
        self.archive = Archive(self.dir)

    def node(self, node_id: str, val: tuple | None, full: bool = True, status: str = "ok", code: str = "",
             test: tuple | None = None):
        """A node whose task_agent/task_agent.py ends with `# node <id>` (plus `code`)."""
        from archive.eval_store import EvalStore
        from archive.records import Node
        from services.workspace import discard

        workspace = self.repo.checkout(self.repo.node_commit("initial"), self.dir / "workspaces" / node_id)
        target = workspace / "task_agent" / "task_agent.py"
        target.write_text(target.read_text() + f"\n# node {node_id}\n{code}")
        commit = self.repo.capture(workspace, self.repo.node_commit("initial"), node_id).commit
        discard(workspace)
        keys = {}
        for split, scores in (("train", val), ("val", val), ("test", test)):
            if scores is None or (split != "train" and not full):
                continue
            key = EvalStore.key(node_id, "imo_grading", split, 0, "synthetic")
            keys[split] = key
            (self.dir / "evals" / key).mkdir(parents=True)
            (self.dir / "evals" / key / "report.json").write_text(json.dumps(
                {"overall_accuracy": scores[1], "normalized_mean_absolute_error": scores[0]}))
        self.archive.record(Node(node_id, "initial", len(self.archive.nodes), commit=commit, status=status,
                                 full_eval={"imo_grading": full}, eval_keys={"imo_grading": keys}))
