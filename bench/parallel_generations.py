"""Generations in flight: the same 8 generations at --parallel 1 and --parallel N, side by side.

Each run is `python -m run_optimization --max_generation 8` against one FakeOpenAI server
that answers every call after a fixed latency: as the meta model it looks around, makes one edit and
stops (5 calls), each child's code differing from its parent's so that it is evaluated in
full (10 staged rows, then 10 more train and 10 val rows, 5 at a time); as the task model
it answers a label. The models' time bounds a generation, as it does with the paper's models
(a call takes tens of seconds), once the framework's own CPU per generation is small: no
sandboxed process imports litellm (a plain client reaches the gateway), and the plots are
redrawn at most every loop.pictures_every_s, so a generation costs the whole process tree
about 0.1 s of CPU beyond its calls. Measured here, 2 cores: 3.61x at 1 s a call (a
generation is 9.3 s of model time), 3.96x at 10 s (90 s), controller 350 MB.

The generations' wall time is measured from the moment the initial node is recorded (the
bench polls archive.jsonl) to the end of the command, so the initial evaluation, the same
in every run, is not counted. Per generation it prints the node's own wall time, the part
of it the models bound (the ledger's latencies: meta calls one after another, task calls
`--eval_workers` at a time) and the rest, the framework's.

    python bench/parallel_generations.py                    # --parallel 4 --latency 10: ~18 min
    python bench/parallel_generations.py --executor ray    # the same on a local Ray cluster

With --executor ray the runs use a local Ray cluster of `--ray_nodes` worker raylets
(ray.cluster_utils.Cluster, on 127.0.0.1), started and stopped by the bench.

The peak RSS printed last is the largest of any process of the runs' trees (controller, workers,
agents), as GNU time reports it for the command, and with --executor ray of the cluster's processes
still there at its end (their VmHWM): getrusage(RUSAGE_CHILDREN) cannot tell it, since exec carries
this process's own peak into its child's ru_maxrss. Without GNU time, getrusage's figure is printed
only when it tops this process's own peak (then it is a child's).

Exits non-zero only when a run fails; a missed target prints FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.fake_openai import FakeOpenAI  # noqa: E402
from support.gnu_time import gnu_time  # noqa: E402

GENERATIONS = 8
# Speed-up of --parallel 4 over --parallel 1: (executor, whether calls take 10 s or more) -> target.
TARGETS = {("local", False): 3.0, ("local", True): 3.8, ("ray", False): 2.8, ("ray", True): 2.8}
META_TURNS = 4  # tool calls of each meta agent run before it says it is done


def respond(request: dict) -> str:
    """The meta agent looks around a few times, then appends a line naming its generation to the
    task agent (so every child's code differs and is evaluated in full); the task agent answers a label."""
    messages = request["messages"]
    opening = " ".join(str(m["content"]) for m in messages[:2])
    if "/feedback" in opening:
        turns = sum(1 for m in messages if m["role"] == "assistant")
        left = opening.split("Iterations left in this run: ", 1)[-1].split(".", 1)[0]
        if turns < META_TURNS - 1:
            action = {"tool_name": "bash", "tool_input": {"command": "ls /workspace/task_agent"}}
        elif turns == META_TURNS - 1:
            action = {"tool_name": "bash", "tool_input": {
                "command": f"echo '# generation with {left} left' >> /workspace/task_agent/task_agent.py"}}
        else:
            return "Done."
        return f"<json>{json.dumps(action)}</json>"
    return '<json>{"response": "partial"}</json>'


def run(server: FakeOpenAI, out: Path, parallel: int, args, ray_address: str | None) -> dict:
    env = {**os.environ, "OPENAI_API_BASE": server.base_url, "OPENAI_API_KEY": "sk-bench",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    run_id = f"n{parallel}"
    cmd = [sys.executable, "-m", "run_optimization", "--domain", "imo_grading", "--output_dir", str(out),
           "--run_id", run_id, "--max_generation", str(GENERATIONS), "--parallel", str(parallel),
           "--eval_samples", str(args.eval_samples), "--eval_workers", str(args.eval_workers),
           "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--sandbox", args.sandbox,
           "--seed", "1"]
    if ray_address:
        cmd += ["--executor", "ray", "--ray_address", ray_address]
    timer, peak_file = gnu_time(), out / f"{run_id}.peak_kb"
    if timer:
        cmd = [timer, "-q", "-f", "%M", "-o", str(peak_file), *cmd]
    log = out / run_id / "archive.jsonl"
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    initial_done = None
    while proc.poll() is None:
        if initial_done is None and log.exists() and '"node_recorded"' in log.read_text():
            initial_done = time.monotonic()
        time.sleep(0.05)
    ended = time.monotonic()
    err = proc.stderr.read()
    if proc.returncode != 0 or initial_done is None:
        raise SystemExit(f"run with --parallel {parallel} failed (exit {proc.returncode}):\n{err[-3000:]}")
    peak_kb = int(peak_file.read_text().split()[-1]) if timer else None
    return {"wall": ended - initial_done, "command": ended - started, "peak_kb": peak_kb,
            **per_generation(out / run_id, args)}


def per_generation(run_dir: Path, args) -> dict:
    """Mean over the generations of the node's wall time and of the part the models bound."""
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    totals, bound, statuses = [], [], []
    for g in range(1, GENERATIONS + 1):
        node = json.loads((run_dir / "nodes" / str(g) / "node.json").read_text())
        statuses.append(node["status"])
        totals.append(node["seconds"]["total"])
        latency = dict(db.execute("SELECT role, COALESCE(SUM(latency_s), 0) FROM calls WHERE node = ? "
                                  "GROUP BY role", (str(g),)).fetchall())
        bound.append(latency.get("meta", 0) + (latency.get("task", 0) + latency.get("try", 0)) / args.eval_workers)
    return {"node": statistics.mean(totals), "bound": statistics.mean(bound),
            "statuses": sorted(set(statuses))}


def largest_child(results: dict, cluster_kb: int = 0) -> str:
    """The largest peak RSS of the runs' processes, as GNU time saw each run (and of a Ray cluster's); without
    it, getrusage's when it tops this process's own peak (a child's then: exec carries over at most that)."""
    if all(r["peak_kb"] is not None for r in results.values()):
        return f"{max(cluster_kb, *(r['peak_kb'] for r in results.values())) / 1024:.1f} MB"
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (f"{children / 1024:.1f} MB" if children > own else
            f"not measured (no GNU time; getrusage gives this process's own peak, {own / 1024:.1f} MB)")


def descendants_peak_kb() -> int:
    """The highest VmHWM (kB) of the processes below this one now: each one's own peak since its exec."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:  # the command name may hold spaces and parentheses: the parent pid follows the last ')'
            children.setdefault(int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]),
                                []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    peak, below = 0, list(children.get(os.getpid(), []))
    while below:
        pid = below.pop()
        below += children.get(pid, [])
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        peak = max([peak, *(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))])
    return peak


def local_cluster(nodes: int):
    """A Ray cluster on this machine: a head without CPUs and `nodes` worker raylets with 2 CPUs each."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(nodes):
        cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    return cluster


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--latency", type=float, default=10.0, help="seconds the fake server takes for every call")
    ap.add_argument("--eval_samples", type=int, default=10, help="rows of each full evaluation split")
    ap.add_argument("--eval_workers", type=int, default=5)
    ap.add_argument("--sandbox", default="bwrap")
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--ray_nodes", type=int, default=2)
    args = ap.parse_args(argv)
    cluster = local_cluster(args.ray_nodes) if args.executor == "ray" else None
    try:
        with tempfile.TemporaryDirectory(prefix="parallel_generations_") as tmp, FakeOpenAI() as server:
            server.set_responder(respond)
            server.latency = args.latency
            address = cluster.address if cluster else None
            results = {n: run(server, Path(tmp), n, args, address) for n in (1, args.parallel)}
        cluster_kb = descendants_peak_kb() if cluster else 0  # Ray's workers, where the agents ran
    finally:
        if cluster:
            cluster.shutdown()
    print(f"{GENERATIONS} generations, executor {args.executor}, sandbox {args.sandbox}, "
          f"every call {args.latency:g} s, "
          f"{args.eval_samples} rows per split, {args.eval_workers} rows at once")
    for n, r in results.items():
        print(f"--parallel {n:<2} generations {r['wall']:7.1f} s  (command {r['command']:.1f} s); per generation: "
              f"wall {r['node']:.1f} s, models {r['bound']:.1f} s, framework {r['node'] - r['bound']:.1f} s; "
              f"nodes {', '.join(r['statuses'])}")
    speedup = results[1]["wall"] / results[args.parallel]["wall"]
    target = TARGETS[args.executor, args.latency >= 10] if args.parallel == 4 else None
    verdict = f"  target >= {target:g}: {'PASS' if speedup >= target else 'FAIL'}" if target else ""
    print(f"speed-up {speedup:.2f}x with --parallel {args.parallel} (ideal {args.parallel}){verdict}")
    print(f"peak RSS of the largest process run (controller, a worker or an agent): "
          f"{largest_child(results, cluster_kb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
