"""Sandbox overhead: what running the task-agent worker in a sandbox costs, per backend.

For each backend (none = a plain subprocess, the reference; bwrap; docker when an
engine and the image are there) it starts the harness's worker on a workspace of the
initial task agent, behind a real gateway forwarding to a FakeOpenAI server that
answers in `--latency` seconds, and measures

- start: from asking the sandbox for the worker to the first row's answer, minus the
  provider's latency (median over `--starts` fresh sandboxes);
- per request: the median round trip of one row (worker -> the agent's client ->
  relay -> gateway -> litellm -> provider and back) minus the time the provider itself took (from its
  receiving the request to its answering, as the fake server timed it), over
  `--requests` sequential rows.

Ratios are to the `none` row of the same run. Peak RSS (VmHWM) of this process
(gateway included) and of each worker's process tree is printed too.

    python bench/sandbox_overhead.py --latency 0.2 --requests 30 --starts 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harness_throughput import TimedFakeOpenAI, _descendants, _status_kb  # noqa: E402

from domains.harness import AgentWorker, worker_mounts  # noqa: E402
from services.config import PROJECT_ROOT, Config  # noqa: E402
from services.gateway import open_gateway  # noqa: E402
from services.sandbox import choose_backend, open_sandbox  # noqa: E402
from services.workspace import copy_evolvable  # noqa: E402

START_TARGET_S = {"bwrap": 1.0, "docker": 2.0}
OVERHEAD_TARGET = 0.05  # of the provider's latency
ROW = {"domain": "imo_grading", "problem": "Show 1 + 1 = 2.", "solution": "Arithmetic.",
       "grading_guidelines": "Full marks for a proof.", "student_answer": "1 + 1 = 2 by definition."}


def ask(worker: AgentWorker, qid: str) -> dict:
    """Send one row to the harness's worker and wait for its answer."""
    worker.proc.send(qid, ROW)
    while True:
        source, msg = worker.results.get(timeout=120)
        if source is worker.proc and msg.get("id") == qid:
            return msg


def tree_peak_mb(pid: int) -> float:
    return sum((_status_kb(p, "VmHWM") or 0) for p in [pid, *_descendants(pid)]) / 1024


def provider_seconds(server: TimedFakeOpenAI) -> float:
    """How long the fake provider took for the last (sequential) request, on its own clock."""
    chats = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    return server.answered_at[-1] - chats[-1]["time"]


def measure(backend: str, gateway, server, config: Config, workspace: Path, out: Path, args) -> dict:
    starts, trips, peak = [], [], 0.0
    for i in range(args.starts):
        began = time.monotonic()
        with open_sandbox(config.sandbox, workspace, worker_mounts(out), gateway.unix_socket, backend) as box:
            worker = AgentWorker(box, "task_agent", "openai/fake", config, gateway, f"bench-{backend}", "task", out,
                                 out.parent / f"worker-{backend}.log")
            worker.start()
            first = ask(worker, f"start-{i}")
            starts.append(time.monotonic() - began - args.latency)
            if first.get("error"):
                raise RuntimeError(f"{backend}: {first['error']}")
            if i == 0:
                for j in range(args.requests):
                    sent = time.monotonic()
                    ask(worker, f"row-{j}")
                    trips.append(time.monotonic() - sent - provider_seconds(server))
                peak = tree_peak_mb(worker.proc.proc.pid)
            worker.stop()
    return {"start": statistics.median(starts), "overhead": statistics.median(trips), "peak_mb": peak}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the fake provider takes per call")
    ap.add_argument("--requests", type=int, default=30, help="sequential rows timed per backend")
    ap.add_argument("--starts", type=int, default=5, help="fresh sandboxes started per backend")
    args = ap.parse_args(argv)

    config = Config()
    backends = ["none", "bwrap"]
    config.sandbox.backend = "docker"
    try:
        choose_backend(config.sandbox)
        backends.append("docker")
    except Exception as e:
        print(f"docker: skipped ({e})")
    with tempfile.TemporaryDirectory(prefix="sandbox_overhead_") as tmp, \
            TimedFakeOpenAI(latency=args.latency) as server:
        server.set_replies(['<json>{"response": "correct"}</json>'])
        os.environ.update(OPENAI_API_BASE=server.base_url, OPENAI_API_KEY="sk-bench")
        workspace = copy_evolvable(PROJECT_ROOT, Path(tmp) / "ws")
        out = Path(tmp) / "agent_evals"
        out.mkdir()
        gateway = open_gateway(config, tmp, "bench")
        gateway.allow_models("openai/fake")
        try:
            results = {b: measure(b, gateway, server, config, workspace, out, args) for b in backends}
        finally:
            gateway.stop()
    base = results["none"]
    print(f"provider latency {args.latency * 1000:.0f} ms; {args.requests} sequential rows; "
          f"median start over {args.starts} sandboxes")
    print(f"{'backend':<8} {'start s':>8} {'x none':>7} {'+ vs none':>10} {'overhead ms':>12} {'% of call':>10} "
          f"{'x none':>7} {'+ vs none':>10} {'worker peak MB':>15}")
    for name, r in results.items():
        print(f"{name:<8} {r['start']:>8.3f} {r['start'] / base['start']:>7.2f} {r['start'] - base['start']:>+10.3f} "
              f"{r['overhead'] * 1000:>12.1f} {r['overhead'] / args.latency:>10.1%} "
              f"{r['overhead'] / base['overhead']:>7.2f} "
              f"{(r['overhead'] - base['overhead']) * 1000:>+10.1f} {r['peak_mb']:>15.1f}")
    print("targets (absolute: the whole stack, the gateway's litellm hop included; added: what the sandbox adds "
          "to `none`):")
    for name, r in results.items():
        if name == "none":
            continue
        checks = [("per-request overhead, absolute", r["overhead"] / args.latency, OVERHEAD_TARGET, "{:.1%}"),
                  ("per-request overhead, added", (r["overhead"] - base["overhead"]) / args.latency, OVERHEAD_TARGET,
                   "{:.1%}"),
                  ("worker start, absolute", r["start"], START_TARGET_S[name], "{:.2f} s"),
                  ("worker start, added", r["start"] - base["start"], START_TARGET_S[name], "{:.2f} s")]
        for what, value, target, fmt in checks:
            verdict = "PASS" if value < target else "FAIL"
            print(f"  {name:<7} {what:<32} {fmt.format(value):>9}  target < {fmt.format(target)}: {verdict}")
    print(f"peak RSS of this process (gateway, fake provider): {(_status_kb(os.getpid(), 'VmHWM') or 0) / 1024:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
