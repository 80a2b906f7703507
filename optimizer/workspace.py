"""What agent code is, as files: the evolvable paths a workspace holds.

A workspace is the folder a sandbox sees: the agent's code and nothing of the
trusted core (no data sets, no labels, no gateway). The loop makes one per node
as a git worktree of the run's repository (`RunRepo`); a standalone harness run
copies these paths from the project.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

# Everything the meta agent may edit; the rest of the project is trusted core.
EVOLVABLE_PATHS = ("agent", "task_agent", "meta_agent", "select_next_parent.py", "ensemble.py")
_NOT_CODE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def copy_evolvable(src_root: str | Path, dst: str | Path) -> Path:
    """Copy the evolvable paths that exist under `src_root` into `dst` (created)."""
    src_root, dst = Path(src_root), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in EVOLVABLE_PATHS:
        src = src_root / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=_NOT_CODE, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dst / name)
    return dst


# Names of the trusted core (and Python start-up hooks): a change the meta agent makes
# under one of these is dropped from its diff, so nothing it writes changes how it is run
# or scored.
PROTECTED_PATHS = ("domains", "optimizer", "archive", "configs", "tests", "bench", "proofgrader_template",
                   "run_optimization.py", "setup_proofgrader_repo.py", "pyproject.toml", "setup.py", "setup.cfg",
                   "conftest.py", "sitecustomize.py", "usercustomize.py", ".gitignore", ".gitattributes")
# Code that is not the task agent: a change only there leaves task-agent results valid.
NOT_TASK_AGENT = ("meta_agent", "select_next_parent.py")
_GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"
_IDENTITY = ["-c", "user.name=hyperagents", "-c", "user.email=hyperagents@localhost", "-c", "commit.gpgsign=false"]


@dataclass
class Capture:
    commit: str | None  # None: nothing changed
    patch: str  # `git diff` of parent -> commit ("" when nothing changed)
    files: int = 0
    insertions: int = 0
    deletions: int = 0
    dropped: list[str] = field(default_factory=list)  # protected paths the change touched, not kept


def _protected(path: str) -> bool:
    top = path.split("/", 1)[0]
    return top in PROTECTED_PATHS or path.endswith(".pth")


class RunRepo:
    """The run's own git repository: one commit per node, agent code only.

    A workspace is a `git worktree` at a node's commit, so making one costs the same
    at any lineage depth (no replay of ancestor patches).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(["git", *_IDENTITY, *args], cwd=cwd or self.path, check=True, capture_output=True,
                              text=True).stdout

    @classmethod
    def create(cls, path: str | Path, source_root: str | Path, initial_agent=None) -> "RunRepo":
        """A new repository whose first commit is the evolvable code under `source_root`,
        with `initial_agent` (an InitialAgent) as the task agent's entry point if given."""
        from optimizer.initial_agents import select_initial_agent

        repo = cls(path)
        copy_evolvable(source_root, repo.path)
        if initial_agent is not None and initial_agent.name != "default":
            select_initial_agent(repo.path, initial_agent)
        (repo.path / ".gitignore").write_text(_GITIGNORE)
        repo.git("init", "-q")
        repo.git("add", "-A")
        repo.git("commit", "-q", "-m", "initial agent")
        repo.git("update-ref", "refs/nodes/initial", "HEAD")
        return repo

    def node_commit(self, node_id: str) -> str:
        return self.git("rev-parse", f"refs/nodes/{node_id}").strip()

    def worktree(self, commit: str, dest: Path) -> Path:
        """A fresh checkout of `commit` at `dest` (an old one there is removed first)."""
        self.remove_worktree(dest)
        self.git("worktree", "add", "-q", "--detach", str(dest), commit)
        return dest

    def export(self, commit: str, dest: Path) -> None:
        """The files of `commit` into the existing folder `dest`, without git metadata."""
        tar = subprocess.run(["git", "archive", "--format=tar", commit], cwd=self.path, capture_output=True,
                             check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(dest, filter="data")

    def remove_worktree(self, dest: Path) -> None:
        if dest.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(dest)], cwd=self.path, capture_output=True)
            shutil.rmtree(dest, ignore_errors=True)
        self.git("worktree", "prune")

    def capture(self, worktree: Path, parent_commit: str, node_id: str) -> Capture:
        """Commit what changed in `worktree` since `parent_commit` as node `node_id`, minus
        protected paths and caches; `Capture.commit` is None when nothing is left."""
        self.git("add", "-A", cwd=worktree)
        touched = self.git("diff", "--cached", "--name-only", parent_commit, cwd=worktree).split("\n")
        dropped = sorted(p for p in touched if p and _protected(p))
        if dropped:
            self.git("reset", "-q", parent_commit, "--", *dropped, cwd=worktree)
        stat = self.git("diff", "--cached", "--numstat", parent_commit, cwd=worktree).strip()
        if not stat:
            return Capture(None, "", dropped=dropped)
        self.git("commit", "-q", "--no-verify", "-m", f"node {node_id}", cwd=worktree)
        commit = self.git("rev-parse", "HEAD", cwd=worktree).strip()
        self.git("update-ref", f"refs/nodes/{node_id}", commit)
        rows = [line.split("\t") for line in stat.splitlines()]
        return Capture(commit, self.git("diff", parent_commit, commit), files=len(rows),
                       insertions=sum(int(r[0]) for r in rows if r[0].isdigit()),
                       deletions=sum(int(r[1]) for r in rows if r[1].isdigit()), dropped=dropped)

    def task_agent_hash(self, commit: str) -> str:
        """A content hash of everything at `commit` the task agent can run, not the meta agent."""
        listing = [line for line in self.git("ls-tree", "-r", commit).splitlines()
                   if line.split("\t", 1)[1].split("/", 1)[0] not in NOT_TASK_AGENT]
        return hashlib.sha256("\n".join(listing).encode()).hexdigest()
