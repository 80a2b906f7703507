"""Local model speed on this machine: prompt and generation tokens per second, seconds per grading sample.

Serves `local/smollm2-135m` the way a run does (llama.cpp's server from the xllamacpp wheel,
started by services.local_model.LocalServer) once with one thread and once with all cores, side by
side, and prints the speed-up. A grading sample goes the whole way a run's does: the
initial task agent's prompt, cut to the configured context, through the gateway, with
the label constrained by its JSON schema.

    python bench/local_model.py [--samples 3] [--context 2048]

Peak memory is VmHWM of the model server (from /proc while it runs) and of this process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harness_throughput import _status_kb  # noqa: E402

from services.local_model import LocalServer  # noqa: E402

MODEL = "local/smollm2-135m"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through an http_proxy


def post(server: LocalServer, body: dict) -> tuple[float, dict]:
    """Seconds and answer of one completion, with the key the server answers only to (as the gateway sends it)."""
    req = urllib.request.Request(f"{server.api_base}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {server.api_key}"})
    started = time.monotonic()
    with DIRECT.open(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.monotonic() - started, out


def text_of_tokens(n: int, salt: str) -> str:
    """Roughly `n` tokens of prose (up to 1.6 times as many: the proofs' formulas take more), different for
    every `salt` so no prompt cache helps, the same in every process."""
    from domains.imo.data import DATA_DIR, load_csv

    answers = " ".join(load_csv(DATA_DIR / "gradingbench_filtered_100_train.csv", ["Response"])["Response"])
    start = (zlib.crc32(salt.encode()) % 50) * 1000
    return f"[{salt}] " + answers[start:start + int(n * 2.7)]


def speeds(threads: int, context: int) -> dict:
    server = LocalServer(MODEL, n_ctx=context, threads=threads).ensure_started()
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], _status_kb(server.proc.pid, "VmHWM") or 0)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        post(server, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})  # warm up
        seconds, out = post(server, {"model": "m", "max_tokens": 1, "messages": [
            {"role": "user", "content": text_of_tokens(min(1000, context // 2), f"p{threads}")}]})
        prompt_tps = out["usage"]["prompt_tokens"] / seconds
        seconds, out = post(server, {"model": "m", "max_tokens": 128, "temperature": 0, "messages": [
            {"role": "user", "content": f"({threads}) Tell a long story about a cat who studies geometry."}]})
        prompt_s = out["usage"]["prompt_tokens"] / prompt_tps
        gen_tps = out["usage"]["completion_tokens"] / max(1e-6, seconds - prompt_s)
    finally:
        stop.set()
        watcher.join()
        server.stop()
    return {"threads": threads, "prompt_tps": prompt_tps, "gen_tps": gen_tps, "server_peak_mb": peak[0] / 1024}


def grading_seconds(samples: int, context: int) -> list[float]:
    """Seconds per grading sample the way a run grades: task agent -> gateway -> local server."""
    from domains.imo.data import DATA_DIR, load_csv
    from services.config import Config
    from services.gateway import open_gateway

    config = Config()
    config.gateway.local_context = context
    gateway = open_gateway(config, tempfile.mkdtemp(prefix="bench-local-"), "bench")
    try:
        gateway.allow_models(MODEL)
        os.environ.update(AGENT_GATEWAY_URL=gateway.url,
                          AGENT_GATEWAY_KEY=gateway.new_session("bench", "task", [MODEL]),
                          AGENT_STRUCTURED_MODELS=MODEL)
        from task_agent.task_agent import TaskAgent

        rows = load_csv(DATA_DIR / "gradingbench_filtered_100_train.csv",
                        ["Problem", "Solution", "Grading guidelines", "Response"]).head(samples + 1)
        times = []
        for i, row in enumerate(rows.to_dict("records")):
            inputs = {"domain": "imo_grading", "problem": row["Problem"], "solution": row["Solution"],
                      "grading_guidelines": row["Grading guidelines"], "student_answer": row["Response"]}
            started = time.monotonic()
            prediction, _ = TaskAgent(MODEL).forward(inputs)
            if i:  # the first sample also starts the server
                times.append(time.monotonic() - started)
            print(f"  sample {i}: {prediction} in {time.monotonic() - started:.2f} s", flush=True)
        return times
    finally:
        gateway.stop()
        gateway.ledger.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=3, help="grading samples timed (after one that starts the server)")
    ap.add_argument("--context", type=int, default=default_context(), help="context the model is served with")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    print(f"model {MODEL}, context {args.context} tokens, {cores} cores")
    results = [speeds(1, args.context), speeds(cores, args.context)]
    for r in results:
        print(f"threads {r['threads']}: prompt {r['prompt_tps']:.0f} tokens/s, generation {r['gen_tps']:.1f} tokens/s, "
              f"server peak RSS {r['server_peak_mb']:.0f} MB")
    one, all_cores = results
    print(f"speed-up of {cores} threads over 1 (side by side): "
          f"prompt {all_cores['prompt_tps'] / one['prompt_tps']:.2f}x, "
          f"generation {all_cores['gen_tps'] / one['gen_tps']:.2f}x")
    print(f"grading samples through the gateway (the default, {LocalServer(MODEL).threads} threads):")
    times = grading_seconds(args.samples, args.context)
    if times:
        print(f"seconds per grading sample: mean {sum(times) / len(times):.2f} "
              f"(min {min(times):.2f}, max {max(times):.2f})")
    print(f"peak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, "
          f"of the model servers {max(r['server_peak_mb'] for r in results):.0f} MB")
    return 0


def default_context() -> int:
    from services.config import GatewayConfig

    return GatewayConfig().local_context


if __name__ == "__main__":
    sys.exit(main())
