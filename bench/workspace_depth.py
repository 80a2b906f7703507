"""Workspace cost against lineage depth: materializing a node at depth 100 vs depth 1.

Builds a run repository (the project's evolvable code), then a chain of `--depth`
nodes, each a small patch of its parent (as a meta agent's edit would be), and times
checking out (a plain folder of) the node at depth 1 and at the deepest node, `--repeat`
times each, interleaved. The reference re-applies every ancestor patch, so its cost
grows with depth; a checkout of one commit does not.

    python bench/workspace_depth.py --depth 100 --repeat 20
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.config import PROJECT_ROOT  # noqa: E402
from services.workspace import RunRepo, discard  # noqa: E402

TARGET = 1.2


def build_chain(repo: RunRepo, depth: int, scratch: Path) -> list[str]:
    commits = [repo.node_commit("initial")]
    for i in range(1, depth + 1):
        ws = repo.checkout(commits[-1], scratch / "edit")
        target = ws / "task_agent" / "task_agent.py"
        target.write_text(target.read_text() + f"\n# generation {i}: a small edit\n")
        (ws / "agent" / "helper.py").write_text(f"VALUE = {i}\n")  # same files: only depth differs
        commits.append(repo.capture(ws, commits[-1], str(i)).commit)
        discard(ws)
    return commits


def time_checkout(repo: RunRepo, commit: str, dest: Path) -> float:
    started = time.perf_counter()
    repo.checkout(commit, dest)
    elapsed = time.perf_counter() - started
    discard(dest)
    return elapsed


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
    s, d = statistics.median(shallow), statistics.median(deep)
    ratio = d / s
    print(f"chain of {args.depth} nodes built in {build_s:.1f} s ({build_s / args.depth * 1000:.0f} ms a node)")
    print(f"materialize depth 1        median {s * 1000:.1f} ms over {args.repeat}")
    print(f"materialize depth {args.depth:<8} median {d * 1000:.1f} ms over {args.repeat}")
    print(f"ratio depth{args.depth}/depth1    {ratio:.3f}  target <= {TARGET}: {'PASS' if ratio <= TARGET else 'FAIL'}")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process {own:.1f} MB, largest git child {children:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
