"""Workspace cost against lineage depth: materializing a node at depth 100 vs depth 1.

Builds a run repository (the project's evolvable code), then a chain of `--depth`
nodes, each a small patch of its parent (as a meta agent's edit would be), and times
checking out (a plain folder of) the node at depth 1 and at the deepest node, `--repeat`
times each, interleaved. The reference re-applies every ancestor patch, so its cost
grows with depth; a checkout of one commit does not.

The largest git child's peak RSS is measured apart, untimed, after the timed checkouts: one of each
step the bench times (making the run repository, a step of the chain, materializing depth 1 and the
deepest node) runs its git commands through GNU time, which reports each one's own peak. getrusage
cannot: exec carries this process's own peak into a child's ru_maxrss. Without GNU time it is not
measured, unless getrusage's figure tops this process's own peak (then it is a child's).

    python bench/workspace_depth.py --depth 100 --repeat 20
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from services.config import PROJECT_ROOT  # noqa: E402
from services.workspace import RunRepo, discard  # noqa: E402
from support.gnu_time import gnu_time  # noqa: E402

TARGET = 1.2


def build_chain(repo: RunRepo, depth: int, scratch: Path) -> list[str]:
    commits = [repo.node_commit("initial")]
    for i in range(1, depth + 1):
        commits.append(chain_step(repo, commits[-1], i, scratch))
    return commits


def chain_step(repo: RunRepo, parent: str, i: int, scratch: Path) -> str:
    """Node `i`, a child of `parent` with a small edit."""
    ws = repo.checkout(parent, scratch / "edit")
    target = ws / "task_agent" / "task_agent.py"
    target.write_text(target.read_text() + f"\n# generation {i}: a small edit\n")
    (ws / "agent" / "helper.py").write_text(f"VALUE = {i}\n")  # same files: only depth differs
    commit = repo.capture(ws, parent, str(i)).commit
    discard(ws)
    return commit


def time_checkout(repo: RunRepo, commit: str, dest: Path) -> float:
    started = time.perf_counter()
    repo.checkout(commit, dest)
    elapsed = time.perf_counter() - started
    discard(dest)
    return elapsed


def largest_git_kb(repo: RunRepo, commits: list[str], scratch: Path) -> int | None:
    """The largest peak RSS (kB) of the git commands of one of each step the bench times, each run through GNU
    time by a `git` first on PATH (RunRepo runs `git` from PATH); None without GNU time."""
    timer, git = gnu_time(), shutil.which("git")
    if not timer or not git:
        return None
    peaks, shim = scratch / "git_peaks", scratch / "shim"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\nexec {shlex.quote(timer)} -q -a -o {shlex.quote(str(peaks))} -f %M '
                              f'{shlex.quote(git)} "$@"\n')
    (shim / "git").chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{shim}{os.pathsep}{path}"
    try:
        RunRepo.create(scratch / "measured", PROJECT_ROOT)
        chain_step(repo, commits[-1], len(commits), scratch)
        for commit in (commits[1], commits[-1]):
            time_checkout(repo, commit, scratch / "ws")
    finally:
        os.environ["PATH"] = path
    return max(int(word) for word in peaks.read_text().split() if word.isdigit())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="workspace_depth_") as tmp:
        tmp = Path(tmp)
        repo = RunRepo.create(tmp / "repo", PROJECT_ROOT)
        started = time.perf_counter()
        commits = build_chain(repo, args.depth, tmp)
        build_s = time.perf_counter() - started
        shallow, deep = [], []
        for _ in range(args.repeat):
            shallow.append(time_checkout(repo, commits[1], tmp / "ws"))
            deep.append(time_checkout(repo, commits[-1], tmp / "ws"))
        git_kb = largest_git_kb(repo, commits, tmp)
    s, d = statistics.median(shallow), statistics.median(deep)
    ratio = d / s
    print(f"chain of {args.depth} nodes built in {build_s:.1f} s ({build_s / args.depth * 1000:.0f} ms a node)")
    print(f"materialize depth 1        median {s * 1000:.1f} ms over {args.repeat}")
    print(f"materialize depth {args.depth:<8} median {d * 1000:.1f} ms over {args.repeat}")
    print(f"ratio depth{args.depth}/depth1    {ratio:.3f}  target <= {TARGET}: {'PASS' if ratio <= TARGET else 'FAIL'}")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # holds this process's peak: see above
    child = (f"{git_kb / 1024:.1f} MB" if git_kb is not None else f"{children:.1f} MB" if children > own else
             "not measured (no GNU time; getrusage gives this process's own peak)")
    print(f"peak RSS: this process {own:.1f} MB, largest git child {child}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
