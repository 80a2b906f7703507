"""A hostile workspace, captured by the host: every git mechanism and file trick a meta agent
could plant, against the code the loop runs after the meta agent's sandbox closes.

The workspace is written here directly (as the meta agent would from inside); the
capture must run none of it, follow no link, read nothing outside the workspace, and
report what it left out.
"""

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from services.config import PROJECT_ROOT
from services.workspace import EVOLVABLE_PATHS, Quota, RunRepo, read_workspace

HOOKS = ("pre-commit", "post-commit", "commit-msg", "pre-auto-gc", "post-checkout", "post-index-change",
         "reference-transaction", "post-rewrite", "fsmonitor-watchman")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return RunRepo.create(tmp_path_factory.mktemp("run") / "repo", PROJECT_ROOT)


@pytest.fixture
def marker(tmp_path):
    """A host folder that any planted program would write into, and a script that does."""
    folder = tmp_path / "markers"
    folder.mkdir()

    def script(path: Path, name: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\ntouch {folder}/{name}\ncat\n")
        path.chmod(0o755)
        return path

    script.folder = folder
    return script


def workspace(repo, tmp_path) -> Path:
    return repo.checkout(repo.node_commit("initial"), tmp_path / "ws")


def edit(ws: Path) -> None:
    """A real change, so the capture goes all the way to a commit and a diff."""
    target = ws / "task_agent" / "task_agent.py"
    target.write_text(target.read_text() + "\n# an edit\n")


def plant_git_dir(git_dir: Path, marker) -> None:
    """A git directory whose every configurable program writes a marker."""
    (git_dir / "objects" / "info").mkdir(parents=True)
    (git_dir / "refs").mkdir()
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    for hook in HOOKS:
        marker(git_dir / "hooks" / hook, f"hook-{hook}")
    fsmonitor = marker(git_dir / "fsmonitor.sh", "fsmonitor")
    clean = marker(git_dir / "clean.sh", "clean-filter")
    textconv = marker(git_dir / "textconv.sh", "textconv")
    included = git_dir / "included.cfg"
    included.write_text(f"[core]\n\tfsmonitor = {fsmonitor}\n")
    (git_dir / "config").write_text(
        f"[core]\n\thooksPath = {git_dir / 'hooks'}\n\tfsmonitor = {fsmonitor}\n\tbare = false\n"
        f"[filter \"evil\"]\n\tclean = {clean}\n\tsmudge = {clean}\n\trequired = true\n"
        f"[diff \"evil\"]\n\ttextconv = {textconv}\n[include]\n\tpath = {included}\n")
    (git_dir / "objects" / "info" / "alternates").write_text("/root\n")
    (git_dir / "index").write_bytes(b"DIRC\x00\x00\x00\x02garbage")


ATTRIBUTES = "* filter=evil diff=evil\n*.py filter=evil diff=evil export-subst\n"


def assert_nothing_ran(marker) -> None:
    assert sorted(os.listdir(marker.folder)) == []


@pytest.mark.attack("a .git folder in the workspace with hooks, fsmonitor, filters, includes, alternates and an index")
def test_a_planted_git_directory_runs_nothing(repo, tmp_path, marker):
    ws = workspace(repo, tmp_path)
    edit(ws)
    plant_git_dir(ws / ".git", marker)
    cap = repo.capture(ws, repo.node_commit("initial"), "git-dir")
    assert_nothing_ran(marker)
    assert cap.commit and ".git" in cap.dropped
    assert repo.git("ls-tree", "-r", "--name-only", cap.commit).count(".git") == 0


@pytest.mark.attack("a .git file pointing at a git directory the agent wrote")
def test_a_gitdir_file_runs_nothing(repo, tmp_path, marker):
    ws = workspace(repo, tmp_path)
    edit(ws)
    plant_git_dir(ws / "agent" / "evil_git", marker)
    (ws / ".git").write_text(f"gitdir: {ws / 'agent' / 'evil_git'}\n")
    cap = repo.capture(ws, repo.node_commit("initial"), "git-file")
    assert_nothing_ran(marker)
    assert ".git" in cap.dropped
    # The planted folder is data of the agent's own tree: kept only as text files, never read as git.
    assert "agent/evil_git/config" in repo.git("ls-tree", "-r", "--name-only", cap.commit)


@pytest.mark.attack("nested .git folders and .gitattributes with filter and textconv drivers inside agent code")
def test_nested_git_metadata_and_attributes_are_dropped(repo, tmp_path, marker):
    ws = workspace(repo, tmp_path)
    edit(ws)
    plant_git_dir(ws / "task_agent" / ".git", marker)
    for folder in (ws, ws / "agent", ws / "task_agent"):
        (folder / ".gitattributes").write_text(ATTRIBUTES)
    (ws / "agent" / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = /root\n')
    cap = repo.capture(ws, repo.node_commit("initial"), "attrs")
    assert_nothing_ran(marker)
    assert {"task_agent/.git", "agent/.gitattributes", "task_agent/.gitattributes", "agent/.gitmodules",
            ".gitattributes"} <= set(cap.dropped)
    # What the host does with the commit next (diff, hash, export) reads no attribute either.
    repo.task_agent_hash(cap.commit)
    repo.checkout(cap.commit, tmp_path / "again")
    assert_nothing_ran(marker)


@pytest.mark.attack("symbolic links to host files and folders, and a top-level folder replaced by a link")
def test_links_are_dropped_and_never_followed(repo, tmp_path):
    secret = tmp_path / "host_secret.txt"
    secret.write_text("HOST-SECRET-CONTENT")
    (tmp_path / "host_dir").mkdir()
    (tmp_path / "host_dir" / "inner.py").write_text("HOST-DIR-CONTENT")
    ws = workspace(repo, tmp_path)
    edit(ws)
    (ws / "task_agent" / "leak.py").symlink_to(secret)
    (ws / "agent" / "dir_link").symlink_to(tmp_path / "host_dir")
    (ws / "agent" / "loop").symlink_to("loop")
    os.rename(ws / "meta_agent", tmp_path / "moved_meta")
    (ws / "meta_agent").symlink_to(tmp_path / "host_dir")
    cap = repo.capture(ws, repo.node_commit("initial"), "links")
    assert {cap.dropped_why[p] for p in ("task_agent/leak.py", "agent/dir_link", "agent/loop", "meta_agent")} == \
        {"a link"}
    everything = _all_text(repo, cap.commit)
    assert "HOST-SECRET-CONTENT" not in everything and "HOST-DIR-CONTENT" not in everything
    assert secret.read_text() == "HOST-SECRET-CONTENT"


def _all_text(repo, commit: str) -> str:
    """Every file of `commit`, concatenated."""
    shas = [line.split()[2] for line in repo.git("ls-tree", "-r", commit).splitlines()]
    return b"".join(repo._blobs(shas).values()).decode("utf-8", "replace")


@pytest.mark.attack("a fifo and a unix socket in the workspace (a capture that opened them would hang)")
def test_special_files_are_dropped_without_blocking(repo, tmp_path):
    import socket

    ws = workspace(repo, tmp_path)
    edit(ws)
    os.mkfifo(ws / "agent" / "pipe.py")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "agent" / "sock.py"))
    result = {}
    worker = threading.Thread(target=lambda: result.update(cap=repo.capture(ws, repo.node_commit("initial"), "fifo")))
    worker.start()
    worker.join(30)
    sock.close()
    assert not worker.is_alive(), "the capture blocked on a fifo"
    assert result["cap"].dropped_why["agent/pipe.py"] == "not a regular file"
    assert result["cap"].dropped_why["agent/sock.py"] == "not a regular file"


@pytest.mark.attack("a file over the per-file quota and many files over the total quota")
def test_quotas_bound_what_is_committed(repo, tmp_path):
    ws = workspace(repo, tmp_path)
    edit(ws)
    with open(ws / "agent" / "huge.bin", "wb") as f:
        f.truncate(64 * 2**20)  # sparse: costs no disk here, 64 MiB to read
    for i in range(40):
        (ws / "agent" / f"chunk_{i:02}.txt").write_bytes(b"x" * 100_000)
    quota = Quota(file_bytes=2**20, total_bytes=2 * 2**20 + sum(len(d) for _, d in
                                                                 read_workspace(repo.checkout(
                                                                     repo.node_commit("initial"),
                                                                     tmp_path / "base")).files.values()))
    cap = repo.capture(ws, repo.node_commit("initial"), "quota", quota)
    assert "over the quota" in cap.dropped_why["agent/huge.bin"]
    over = [p for p, why in cap.dropped_why.items() if why == "over the workspace quota" and "chunk_" in p]
    assert 15 <= len(over) <= 25  # about half of the 4 MB of chunks fits into the 2 MB left (the agent's own files
    # after them in the walk may or may not fit as well, by a few KB of the project's files)
    sizes = [int(line.split()[3]) for line in repo.git("ls-tree", "-r", "-l", cap.commit).splitlines()]
    assert sum(sizes) <= quota.total_bytes


@pytest.mark.attack("Python start-up hooks (.pth, sitecustomize.py) and protected core paths in the workspace")
def test_startup_hooks_and_core_paths_are_dropped(repo, tmp_path):
    ws = workspace(repo, tmp_path)
    edit(ws)
    (ws / "agent" / "evil.pth").write_text("import os; os.system('touch /tmp/pwned')\n")
    (ws / "sitecustomize.py").write_text("import os\n")
    (ws / "domains").mkdir()
    (ws / "domains" / "metrics.py").write_text("cheat = True\n")
    (ws / "pyproject.toml").write_text("[project]\n")
    cap = repo.capture(ws, repo.node_commit("initial"), "startup")
    assert {"agent/evil.pth", "sitecustomize.py", "domains", "pyproject.toml"} <= set(cap.dropped)
    names = repo.git("ls-tree", "-r", "--name-only", cap.commit).split()
    assert not any(n.endswith(".pth") or n.split("/")[0] not in EVOLVABLE_PATHS for n in names)


@pytest.mark.attack("file names with a newline, a quote or a backslash (they would forge lines of git's input)")
def test_unsafe_names_are_dropped(repo, tmp_path):
    ws = workspace(repo, tmp_path)
    edit(ws)
    for name in ("evil\nM 100644 inline pwned.py", '"quoted.py', "back\\slash.py"):
        (ws / "agent" / name).write_text("x = 1\n")
    cap = repo.capture(ws, repo.node_commit("initial"), "names")
    assert sum(1 for why in cap.dropped_why.values() if why == "an unprintable name") == 3
    assert "pwned" not in repo.git("ls-tree", "-r", "--name-only", cap.commit)


@pytest.mark.attack("set-uid and world-writable modes on workspace files")
def test_only_plain_file_modes_are_kept(repo, tmp_path):
    ws = workspace(repo, tmp_path)
    edit(ws)
    tool = ws / "agent" / "tool.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4777)
    cap = repo.capture(ws, repo.node_commit("initial"), "modes")
    again = repo.checkout(cap.commit, tmp_path / "again")
    mode = stat.S_IMODE((again / "agent" / "tool.sh").stat().st_mode)
    assert mode == 0o755


def test_capture_of_a_hostile_workspace_never_starts_git_in_it(repo, tmp_path, marker, monkeypatch):
    """Every git command the capture runs has the run's own repository as its directory."""
    ws = workspace(repo, tmp_path)
    edit(ws)
    plant_git_dir(ws / ".git", marker)
    seen = []
    real_run = subprocess.run

    def spy(argv, *args, **kwargs):
        if argv and argv[0] == "git":
            seen.append((kwargs.get("cwd"), (kwargs.get("env") or {}).get("GIT_DIR")))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    repo.capture(ws, repo.node_commit("initial"), "spy")
    assert seen and all(Path(cwd) == repo.git_dir and Path(git_dir) == repo.git_dir for cwd, git_dir in seen)


@pytest.mark.attack("a link planted in a folder the host later fills with a node's files (the evaluation "
                    "workspace)")
def test_export_never_writes_through_a_planted_link(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "eval_ws"
    dest.mkdir()
    (dest / "agent").symlink_to(outside)
    with pytest.raises(OSError):
        repo.export(repo.node_commit("initial"), dest)
    assert list(outside.iterdir()) == []


@pytest.mark.attack("a change built to be slow for git's diff (a large file with its lines reversed) past the diff's "
                    "deadline: the capture and the dashboard's compare page")
def test_a_change_too_slow_to_diff_is_recorded_by_its_files(repo, tmp_path, monkeypatch):
    import time

    import services.workspace as workspace_module
    from apps.dashboard import compare

    ws = workspace(repo, tmp_path)
    lines = [f"line {i} = {i * 7919 % 100003}\n" for i in range(200_000)]
    (ws / "task_agent" / "big.py").write_text("".join(lines))
    first = repo.capture(ws, repo.node_commit("initial"), "slow-a")
    (ws / "task_agent" / "big.py").write_text("".join(reversed(lines)))
    edit(ws)
    monkeypatch.setattr(workspace_module, "DIFF_TIMEOUT_S", 0.05)  # the real one is 20 s: here git needs ~0.5 s
    started = time.monotonic()
    captured = repo.capture(ws, first.commit, "slow-b")
    assert time.monotonic() - started < 10
    assert captured.commit is not None and captured.files == 2
    assert captured.patch.startswith("# not shown: this change took over 0.05 s to diff")
    assert "+++ b/task_agent/big.py\n" in captured.patch and "+++ b/task_agent/task_agent.py\n" in captured.patch
    assert "line 1 =" not in captured.patch  # no line of the change: it was not diffed
    # The dashboard's compare page says the same, rather than waiting on git.
    reader = type("Reader", (), {"path": repo.path.parent})()
    a, b = (type("N", (), {"commit": c})() for c in (first.commit, captured.commit))
    monkeypatch.setattr(compare, "RunRepo", lambda path: repo)
    assert "too large to diff in time" in compare.code_diff(reader, a, b).missing
