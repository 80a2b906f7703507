"""SC-TIR overhead: what the candidates' threads and code runs cost beyond the model calls.

A FakeOpenAI server answers at once, scripted so that every candidate writes one short
python block at each of its first MAX_DEPTH - 1 turns and then boxes an answer: per problem
NUM_CANDIDATES x MAX_DEPTH model calls and NUM_CANDIDATES x (MAX_DEPTH - 1) code runs, each
run a fresh interpreter. agent.llm calls the server directly (OPENAI_API_BASE, no gateway).

Per problem it prints the wall time of `TaskAgent.forward` (threads, litellm, code runs)
beside the time of the same number of bare `get_response` calls made one after another in
the same run, and their ratio. The server is harness_throughput's FakeOpenAI with Nagle's
algorithm off, as a real provider has it; the stock fake can hold each reply ~40 ms for a
delayed ACK, which would be billed to the bare calls.

Peak RSS of this process and of its largest child come from getrusage. Linux folds a
child's memory before exec (a copy of this process) into the child's figure, so the peak
of a code run's own interpreter (VmHWM, read by a code run) is printed beside it.

    python bench/sc_tir_overhead.py --problems 3
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harness_throughput import TimedFakeOpenAI  # noqa: E402

from agent.llm import get_response  # noqa: E402
from task_agent.baselines import sc_tir  # noqa: E402

MODEL = "openai/fake"
CODE_REPLY = "Let me compute it.\n```python\nprint(6 * 7)\n```"
ANSWER_REPLY = "So the answer is \\boxed{42}."
OWN_PEAK_KB = "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"


def reply(body: dict) -> str:
    """Code at each of the first MAX_DEPTH - 1 turns of a conversation, then the answer."""
    turn = len(body["messages"]) // 2
    return CODE_REPLY if turn < sc_tir.MAX_DEPTH - 1 else ANSWER_REPLY


def bare_calls(count: int) -> float:
    """Seconds for `count` sequential calls shaped like the agent's first call."""
    messages = [{"role": "user", "content": sc_tir.solve_prompt("What is six times seven?")}]
    started = time.perf_counter()
    for _ in range(count):
        get_response(messages, model=MODEL, temperature=sc_tir.TEMPERATURE, stop=["```output"])
    return time.perf_counter() - started


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=3, help="problems to solve, each measured on its own")
    args = ap.parse_args(argv)
    calls = sc_tir.NUM_CANDIDATES * sc_tir.MAX_DEPTH
    runs = sc_tir.NUM_CANDIDATES * (sc_tir.MAX_DEPTH - 1)
    with TimedFakeOpenAI(responder=reply) as server:
        os.environ.pop("AGENT_GATEWAY_URL", None)
        os.environ.update(OPENAI_API_BASE=server.base_url, OPENAI_API_KEY="sk-fake-bench-key")
        bare_calls(1)  # litellm's first-call set-up is not the agent's overhead
        print(f"N={sc_tir.NUM_CANDIDATES} candidates, M={sc_tir.MAX_DEPTH}: {calls} model calls "
              f"and {runs} code runs per problem, on {os.cpu_count()} CPUs")
        print(f"{'problem':>7}  {'forward s':>9}  {'bare calls s':>12}  {'ratio':>5}  calls  prediction")
        for i in range(1, args.problems + 1):
            before = server.count
            started = time.perf_counter()
            prediction, _ = sc_tir.TaskAgent(MODEL).forward({"domain": "aime2025", "problem": f"Problem {i}"})
            forward_s = time.perf_counter() - started
            made = server.count - before
            bare_s = bare_calls(made)
            print(f"{i:>7}  {forward_s:>9.3f}  {bare_s:>12.3f}  {forward_s / bare_s:>5.2f}  {made:>5}  {prediction}")
        started = time.perf_counter()
        for _ in range(5):
            sc_tir.run_code("print(6 * 7)")
        print(f"one code run alone: {(time.perf_counter() - started) / 5 * 1000:.0f} ms (mostly interpreter start-up)")
    # On Linux ru_maxrss is in kB; for children it is the largest one, not a sum.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    code_run = int(sc_tir.run_code(OWN_PEAK_KB)) / 1024
    print(f"peak RSS: this process {own:.1f} MB, largest child {child:.1f} MB (getrusage), "
          f"a code run's own interpreter {code_run:.1f} MB (VmHWM)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
