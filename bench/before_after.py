"""Generation overhead and harness throughput of two commits, side by side in one run.

Each commit is checked out as a detached `git worktree` in a private temp folder (removed at the
end). The two bench drivers of this checkout, bench/generation_overhead.py and
bench/harness_throughput.py (with tests/support/fake_openai.py, their fake provider), are copied
into both trees, so the same driver measures each tree: they only start the project's command
lines (`python -m run_optimization`, `python -m domains.harness`). Every bench runs with its cwd
and PYTHONPATH set to its own tree; before measuring, a child interpreter checks that the
project's packages import from that tree (not from the editable install), and after each run
no command line seen in its process tree may name the other tree or this checkout.

Rounds alternate the order (before, after, then after, before, ...), and both trees run each bench
back to back, so a load that drifts (another job on the machine) falls on both. One warm-up round
is not counted. Per measure it prints the median of each side, the ratio after/before and the
highest peak RSS (VmHWM) of each side's processes, and ends with one line:

    generation overhead after/before=R1  harness throughput after/before=R2

Overhead is the framework time of one generation (lower is better); throughput is evaluated rows
per second of the harness's sampling phase (higher is better). So both say "no worse" at <= 1.0
and >= 1.0 respectively.

    python bench/before_after.py --before 8caf43b --after HEAD --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = ("bench/generation_overhead.py", "bench/harness_throughput.py", "bench/__init__.py",
           "tests/support/fake_openai.py")  # copied into both trees (the ones that exist here)
PACKAGES = ("services", "domains.harness", "run_optimization", "optimizer", "archive", "agent")
RUN_TIMEOUT_S = 600
# What each bench's --json must hold for this script; `read_result` refuses output without it.
REQUIRED = {"generation_overhead": ("status", "wall_s", "model_s", "framework_s", "peak_rss_mb", "commands"),
            "harness_throughput": ("failure", "rows", "sampling_s", "total_s", "peak_rss_mb", "commands")}


@dataclass
class Tree:
    name: str  # "before" or "after"
    rev: str  # as given
    sha: str
    subject: str
    path: Path
    results: dict[str, list[dict]] = field(default_factory=lambda: {bench: [] for bench in REQUIRED})


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@contextmanager
def worktrees(revs: dict[str, str]) -> Iterator[list[Tree]]:
    """A detached worktree of each rev in one private temp folder; removed (and pruned) on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="before_after_"))
    trees: list[Tree] = []
    try:
        for name, rev in revs.items():
            sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
            path = tmp / name
            git("worktree", "add", "--detach", str(path), sha)
            trees.append(Tree(name, rev, sha, git("log", "-1", "--format=%s", sha), path))
        yield trees
    finally:
        for tree in trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree.path)],
                           capture_output=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def tree_env(tree: Tree) -> dict[str, str]:
    """This process's environment with only `tree` on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": str(tree.path)}


def prepare(tree: Tree) -> None:
    """Copy the drivers in, check where the project imports from, and compile the tree's modules
    (so no side pays for writing .pyc files in a timed run)."""
    for rel in DRIVERS:
        if (ROOT / rel).is_file():
            (tree.path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, tree.path / rel)
    probe = ("import importlib, json, sys\n"
             f"print(json.dumps({{n: importlib.import_module(n).__file__ for n in {list(PACKAGES)!r}}}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tree.path, env=tree_env(tree),
                          capture_output=True, text=True, check=True)
    files = json.loads(done.stdout)
    stray = {name: f for name, f in files.items() if not Path(f).resolve().is_relative_to(tree.path.resolve())}
    if stray:
        raise SystemExit(f"{tree.name}: these import from outside {tree.path}: {stray}")
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(tree.path)], cwd=tree.path,
                   env=tree_env(tree), capture_output=True)


def read_result(stdout: str, bench: str) -> dict:
    """The JSON object a bench printed with --json (its last line that is one), with the keys
    this script reads; ValueError naming what is missing."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            break
    else:
        raise ValueError(f"{bench}: no JSON line in its output (a driver without --json?)")
    missing = [key for key in REQUIRED[bench] if key not in result]
    if missing:
        raise ValueError(f"{bench}: its JSON lacks {', '.join(missing)}")
    return result


def bench_command(bench: str, args: argparse.Namespace) -> list[str]:
    if bench == "generation_overhead":
        extra = ["--sandbox", args.sandbox, "--eval_samples", str(args.eval_samples)]
    else:
        extra = ["--samples", str(args.samples), "--workers", str(args.workers), "--latency", str(args.latency),
                 "--no_bare"]
    return [sys.executable, f"bench/{bench}.py", "--json", *extra]


def run_bench(tree: Tree, others: list[Path], bench: str, args: argparse.Namespace) -> dict:
    """One run of `bench` in `tree`; exits with its output when it failed or strayed."""
    done = subprocess.run(bench_command(bench, args), cwd=tree.path, env=tree_env(tree), capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    try:
        if done.returncode != 0:
            raise ValueError(f"{bench} exited with {done.returncode}")
        result = read_result(done.stdout, bench)
        failure = result["failure"] if bench == "harness_throughput" else (
            None if result["status"] == "ok" else f"node 1 is {result['status']}")
        if failure:
            raise ValueError(f"{bench}: {failure}")
    except ValueError as e:
        raise SystemExit(f"{tree.name} ({tree.sha[:8]}): {e}\n--- its output (tail) ---\n"
                         f"{(done.stdout + done.stderr)[-3000:]}") from None
    foreign = [cmd for cmd in result["commands"] if any(str(other) in cmd for other in others)]
    if foreign:
        raise SystemExit(f"{tree.name}: a process of its {bench} run names another tree: {foreign[0][:300]}")
    return result


def measures(results: dict[str, list[dict]]) -> dict[str, list[float]]:
    """Per measure, the value of each run (in run order)."""
    gen, harness = results["generation_overhead"], results["harness_throughput"]
    return {
        "generation framework time (s)": [r["framework_s"] for r in gen],
        "generation wall time (s)": [r["wall_s"] for r in gen],
        "harness sampling time (s)": [r["sampling_s"] for r in harness],
        "harness throughput (rows/s)": [r["rows"] / r["sampling_s"] for r in harness],
        "harness whole command (s)": [r["total_s"] for r in harness],
    }


def peaks(results: dict[str, list[dict]]) -> dict[str, float]:
    """The highest peak RSS (MB) of each kind of process over all runs of a side."""
    kinds = {"generation_overhead": {"controller": "gen. controller", "run_meta+relay": "gen. meta runner",
                                     "worker+relay": "gen. eval worker"},
             "harness_throughput": {"harness": "harness process", "worker": "harness worker",
                                    "all": "harness, all procs"}}
    return {label: max((r["peak_rss_mb"].get(kind, 0.0) for r in results[bench]), default=0.0)
            for bench, labels in kinds.items() for kind, label in labels.items()}


def ratio(after: list[float], before: list[float]) -> float:
    return statistics.median(after) / statistics.median(before)


def table(before: Tree, after: Tree) -> list[str]:
    b, a = measures(before.results), measures(after.results)
    lines = [f"{'measure':<32} {'before':>9} {'after':>9} {'after/before':>13}   runs before | after"]
    for name in b:
        runs = " ".join(f"{v:.2f}" for v in b[name]) + " | " + " ".join(f"{v:.2f}" for v in a[name])
        lines.append(f"{name:<32} {statistics.median(b[name]):>9.3f} {statistics.median(a[name]):>9.3f} "
                     f"{ratio(a[name], b[name]):>13.3f}   {runs}")
    pb, pa = peaks(before.results), peaks(after.results)
    for name in pb:
        lines.append(f"{'peak RSS ' + name + ' (MB)':<32} {pb[name]:>9.1f} {pa[name]:>9.1f} "
                     f"{pa[name] / pb[name] if pb[name] else float('nan'):>13.3f}   (VmHWM, highest run)")
    overhead = ratio(a["generation framework time (s)"], b["generation framework time (s)"])
    throughput = ratio(a["harness throughput (rows/s)"], b["harness throughput (rows/s)"])
    lines.append(f"generation overhead after/before={overhead:.3f}  harness throughput after/before={throughput:.3f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, metavar="REV", help="the commit measured as 'before'")
    ap.add_argument("--after", default="HEAD", metavar="REV", help="the commit measured as 'after' (HEAD)")
    ap.add_argument("--rounds", type=int, default=8, help="counted rounds; each runs both benches on both trees")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted")
    ap.add_argument("--sandbox", default="bwrap", help="generation_overhead's --sandbox")
    ap.add_argument("--eval_samples", type=int, default=20, help="generation_overhead's --eval_samples")
    ap.add_argument("--samples", type=int, default=100, help="harness_throughput's --samples")
    ap.add_argument("--workers", type=int, default=10, help="harness_throughput's --workers")
    ap.add_argument("--latency", type=float, default=0.2, help="harness_throughput's --latency")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        ap.error("--rounds must be 1 or more and --warmup 0 or more")
    started, load = time.monotonic(), os.getloadavg()[0]
    with worktrees({"before": args.before, "after": args.after}) as trees:
        for tree in trees:
            prepare(tree)
            print(f"{tree.name:<6} {tree.sha[:10]} ({tree.rev}) {tree.subject[:80]}", flush=True)
        for round_ in range(args.warmup + args.rounds):
            counted = round_ >= args.warmup
            order = trees if round_ % 2 == 0 else trees[::-1]
            for bench in REQUIRED:
                for tree in order:
                    others = [t.path for t in trees if t is not tree] + [ROOT]
                    result = run_bench(tree, others, bench, args)
                    if counted:
                        tree.results[bench].append(result)
                    value = (f"framework {result['framework_s']:.3f} s" if bench == "generation_overhead"
                             else f"sampling {result['sampling_s']:.3f} s")
                    label = f"round {round_ - args.warmup + 1}" if counted else "warm-up"
                    print(f"{label:<8} {bench:<20} {tree.name:<6} {value}", flush=True)
        before, after = trees
        print(f"{args.rounds} rounds (+{args.warmup} warm-up), order alternating each round; load average "
              f"{load:.2f} at start, {os.getloadavg()[0]:.2f} at end, {os.cpu_count()} CPUs; "
              f"{time.monotonic() - started:.0f} s")
        print("\n".join(table(before, after)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
