"""What agent code is, as files, and the run's git repository of its versions.

A workspace is the folder a sandbox sees: the agent's code and nothing of the trusted
core (no data sets, no labels, no gateway). The loop makes one per node from the
run's repository (`RunRepo.checkout`); a standalone harness run copies the evolvable
paths from the project.

A workspace the meta agent wrote is hostile input. Git is never run on it: no `.git`
entry, config, hook, attribute, filter or index of it is ever read. `read_workspace`
takes its regular files as bytes (links, devices, fifos, git metadata, caches and
anything outside the evolvable paths are left out and reported), within a quota, and
`RunRepo.commit_files` writes them as a commit with `git fast-import`, a plumbing
command that reads no work tree, from the run's own repository, with every
configurable hook, filter and attribute source switched off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.git_safety import DIFF_TIMEOUT_S, GIT_TIMEOUT_S, check_repository
from services.git_safety import GIT_ENV as _GIT_ENV
from services.git_safety import GIT_OPTIONS as _GIT_OPTIONS
from services.render import bidi_files
from services.workspace_read import _CACHES, EVOLVABLE_PATHS, Quota, read_workspace
from services.write_failures import disk_down, host_write

# Code that is not the task agent: a change only there leaves task-agent results valid. ensemble.py runs
# only in `python -m apps.ensemble RUN --rule agent`, on stored predictions, never in a node's evaluation.
NOT_TASK_AGENT = ("meta_agent", "meta_agent.py", "select_next_parent.py", "ensemble.py", "README.md")
_NOT_CODE = shutil.ignore_patterns(*_CACHES, "*.pyc")


@dataclass
class Capture:
    commit: str | None  # None: nothing changed
    patch: str  # `git diff` of parent -> commit ("" when nothing changed)
    files: int = 0
    insertions: int = 0
    deletions: int = 0
    dropped: list[str] = field(default_factory=list)  # what the workspace held that was not kept
    dropped_why: dict[str, str] = field(default_factory=dict)  # path -> reason
    bidi: list[str] = field(default_factory=list)  # files whose added lines hold bidi controls (Trojan Source)


def copy_evolvable(src_root: str | Path, dst: str | Path) -> Path:
    """Copy the evolvable paths that exist under `src_root` (trusted: the project) into `dst`."""
    src_root, dst = Path(src_root), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in EVOLVABLE_PATHS:
        src = src_root / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=_NOT_CODE, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dst / name)
    return dst


class RunRepo:
    """The run's own git repository: one commit per node (`refs/nodes/<id>`), agent code only.

    Bare, written only by the core, and never given a work tree: workspaces are plain
    folders filled from a commit (`checkout`), so making one costs the same at any lineage
    depth and leaves nothing registered in the repository. Runs made before this layout
    have the repository in `repo/.git`; both are read the same way.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._writing = threading.Lock()  # one fast-import at a time (generations in flight commit from threads)
        self._evolvable: tuple[str, ...] | None = None
        dot_git = self.path / ".git"
        self.git_dir = dot_git if dot_git.is_dir() and not dot_git.is_symlink() else self.path
        if os.path.lexists(self.git_dir):
            check_repository(self.git_dir)

    def git(self, *args: str, input: bytes | None = None) -> str:
        return self.git_bytes(*args, input=input).decode("utf-8", errors="replace")

    def git_bytes(self, *args: str, input: bytes | None = None, timeout: float = GIT_TIMEOUT_S) -> bytes:
        """One git command on the run's repository, in the hardened environment, its stdin `input` or
        nothing; its stdout (subprocess.TimeoutExpired, the command killed, past `timeout` seconds)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **_GIT_ENV, "GIT_DIR": str(self.git_dir)}
        result = subprocess.run(["git", *_GIT_OPTIONS, *args], cwd=self.git_dir, env=env, input=input or b"",
                                capture_output=True, check=False, timeout=timeout)
        if result.returncode != 0:
            if (down := disk_down(self.git_dir)) is not None:  # git's words may quote agent file names: not read
                raise down
            raise subprocess.CalledProcessError(result.returncode, ["git", *args], result.stdout, result.stderr)
        return result.stdout

    @classmethod
    def create(cls, path: str | Path, source_root: str | Path,
               prepare: Callable[[Path], None] | None = None) -> RunRepo:
        """A new repository whose first commit is the evolvable code under `source_root`, after
        `prepare(folder)` adjusted the copy (e.g. InitialAgent.apply: which task agent starts)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(path)], env={**os.environ, **_GIT_ENV}, check=True,
                       capture_output=True)
        repo = cls(path)
        with tempfile.TemporaryDirectory(prefix="hyperagents-initial-") as scratch:
            copy_evolvable(source_root, scratch)
            if prepare is not None:
                prepare(Path(scratch))
            repo.commit_files(read_workspace(scratch, only=None).files, None, "initial", "initial agent")
        return repo

    def evolvable(self) -> tuple[str, ...]:
        """The top-level names a node's commit may hold: the project's evolvable paths, and every name
        the initial commit has (a run started from an agent folder, whose layout is its own)."""
        if self._evolvable is None:
            names = self.git("ls-tree", "--name-only", "-z", "refs/nodes/initial^{commit}").split("\0")
            self._evolvable = tuple(dict.fromkeys([*EVOLVABLE_PATHS, *(n for n in names if n)]))
        return self._evolvable

    def node_commit(self, node_id: str) -> str:
        return self.git("rev-parse", "--verify", "--end-of-options", f"refs/nodes/{node_id}^{{commit}}").strip()

    # -- from commits to folders ------------------------------------------------------------
    def checkout(self, commit: str, dest: Path) -> Path:
        """A fresh folder `dest` holding the files of `commit` (an old one there is removed first)."""
        discard(dest)
        with host_write(dest):
            dest.mkdir(parents=True)
        self.export(commit, dest)
        return dest

    def export(self, commit: str, dest: Path) -> None:
        """The files of `commit` into the existing folder `dest`, without git metadata.

        Blobs are read with `cat-file`, not `git archive`, so no attribute of the tree
        (export-subst, export-ignore) applies."""
        entries = []
        for record in self.git("ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
            if not record:
                continue
            meta, path = record.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob" and mode in ("100644", "100755") and _safe_relative(path):
                entries.append((mode, sha, path))
        blobs = self._blobs([sha for _, sha, _ in entries])
        with host_write(dest):  # a disk that cannot hold the workspace is this machine's failure
            root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                for mode, sha, path in entries:
                    _write_below(root, path, blobs[sha], 0o755 if mode == "100755" else 0o644)
            finally:
                os.close(root)

    def _blobs(self, shas: list[str]) -> dict[str, bytes]:
        """The contents of blobs, read in one `git cat-file --batch`."""
        if not shas:
            return {}
        out = self.git_bytes("cat-file", "--batch", input="".join(f"{s}\n" for s in dict.fromkeys(shas)).encode())
        blobs, pos = {}, 0
        while pos < len(out):
            header_end = out.index(b"\n", pos)
            sha, _, size = out[pos:header_end].decode().split()
            start = header_end + 1
            blobs[sha] = out[start:start + int(size)]
            pos = start + int(size) + 1
        return blobs

    # -- from folders to commits ------------------------------------------------------------
    def capture(self, workspace: Path, parent_commit: str, node_id: str, quota: Quota = Quota()) -> Capture:
        """Commit what `workspace` holds as node `node_id`, a child of `parent_commit`; only
        its regular files under the evolvable paths, read as data (see `read_workspace`).
        `Capture.commit` is None when that equals the parent."""
        snap = read_workspace(workspace, quota, only=self.evolvable())
        dropped = sorted(snap.dropped)
        commit = self.commit_files(snap.files, parent_commit, node_id, f"node {node_id}")
        if self.git("rev-parse", f"{commit}^{{tree}}") == self.git("rev-parse", f"{parent_commit}^{{tree}}"):
            self.git("update-ref", "-d", f"refs/nodes/{node_id}")
            return Capture(None, "", dropped=dropped, dropped_why=snap.dropped)
        try:
            stat_lines = self._diff("--numstat", parent_commit, commit).strip().splitlines()
            patch = self._diff(parent_commit, commit)
        except subprocess.TimeoutExpired:  # an agent's worst case for the diff's algorithm, within the quota
            stat_lines, patch = self._files_only(parent_commit, commit)
        rows = [line.split("\t") for line in stat_lines]
        return Capture(commit, patch, files=len(rows),
                       insertions=sum(int(r[0]) for r in rows if r[0].isdigit()),
                       deletions=sum(int(r[1]) for r in rows if r[1].isdigit()), dropped=dropped,
                       dropped_why=snap.dropped, bidi=bidi_files(patch))

    def diff(self, a: str, b: str) -> str:
        """The unified diff from commit `a` to commit `b` (no diff driver or textconv of the tree applies);
        subprocess.TimeoutExpired past DIFF_TIMEOUT_S."""
        return self._diff("--end-of-options", a, b)

    def _diff(self, *args: str) -> str:
        out = self.git_bytes("diff", "--no-ext-diff", "--no-textconv", "--no-color", *args, timeout=DIFF_TIMEOUT_S)
        return out.decode("utf-8", errors="replace")

    def _files_only(self, a: str, b: str) -> tuple[list[str], str]:
        """What a diff too slow to compute is recorded as: each changed file's header, no lines (comparing
        trees is linear), as numstat rows of unknown counts and a patch whose first line says why."""
        names = [n for n in self.git("diff", "--no-renames", "--name-only", "-z", a, b).split("\0") if n]
        note = f"# not shown: this change took over {DIFF_TIMEOUT_S:g} s to diff, so only its files are listed\n"
        patch = note + "".join(f"diff --git a/{n} b/{n}\n--- a/{n}\n+++ b/{n}\n" for n in names)
        return [f"-\t-\t{n}" for n in names], patch

    def commit_files(self, files: dict[str, tuple[bool, bytes]], parent: str | None, node_id: str,
                     message: str) -> str:
        """Write `files` as the whole tree of a new commit `refs/nodes/<node_id>` (replacing an
        earlier one of that name, from a generation redone after a kill); returns its id."""
        ref = f"refs/nodes/{node_id}"
        self.git("check-ref-format", ref)
        text = message.encode()
        stream = [f"commit {ref}\ncommitter hyperagents <hyperagents@localhost> {int(time.time())} +0000\n"
                  f"data {len(text)}\n".encode() + text + b"\n"]
        if parent:
            stream.append(f"from {parent}\n".encode())
        stream.append(b"deleteall\n")
        for path, (executable, data) in sorted(files.items()):
            stream.append(f"M {'100755' if executable else '100644'} inline {path}\ndata {len(data)}\n".encode())
            stream += [data, b"\n"]
        stream.append(b"done\n")
        with self._writing:
            self.git("fast-import", "--quiet", "--done", "--force", input=b"".join(stream))
        return self.node_commit(node_id)

    def task_agent_hash(self, commit: str) -> str:
        """A content hash of everything at `commit` the task agent can run, not the meta agent."""
        listing = [line for line in self.git("ls-tree", "-r", commit).splitlines()
                   if line.split("\t", 1)[1].split("/", 1)[0] not in NOT_TASK_AGENT]
        return hashlib.sha256("\n".join(listing).encode()).hexdigest()


def _write_below(root: int, path: str, data: bytes, mode: int) -> None:
    """Create the file `path` under the folder `root` (a descriptor), making its folders; no
    link on the way is followed, so a sandbox that shares the folder cannot redirect the write."""
    *folders, name = path.split("/")
    fd = os.dup(root)
    try:
        for folder in folders:
            try:
                os.mkdir(folder, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        with os.fdopen(out, "wb") as f:
            f.write(data)
    finally:
        os.close(fd)


def write_files(root: str | Path, files: dict[str, tuple[bool, bytes]]) -> list[str]:
    """Write `files` (path -> (executable, content), as `read_workspace` gives them) below the
    existing folder `root`, which must not hold them yet; a path that is not a plain relative one,
    or leads through a link or a file, is skipped. Returns the paths not written."""
    skipped = []
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for path, (executable, data) in sorted(files.items()):
            try:
                if not _safe_relative(path) or "\0" in path:
                    raise ValueError(path)
                _write_below(top, path, data, 0o755 if executable else 0o644)
            except (OSError, ValueError):
                skipped.append(path)
    finally:
        os.close(top)
    return skipped


def _safe_relative(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def discard(folder: Path) -> None:
    """Remove a workspace folder; links in it are removed, never followed."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)
