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

Peak RSS of this process comes from getrusage. Its children's cannot: exec carries the spawning
process's own peak into a child's ru_maxrss. So the largest child is measured apart, after the
timed problems, on one more problem whose code runs each write their own VmHWM as they exit
(started through PEAK_AT_EXIT, which runs solution.py as `python solution.py` would); the peak
of one code run's interpreter (VmHWM, read by the code it runs) is printed beside it.

    python bench/sc_tir_overhead.py --problems 3
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

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
# `python -c PEAK_AT_EXIT FILE solution.py`: runs solution.py as `python solution.py` does (no import
# more), and as the interpreter exits, before its output closes, appends its VmHWM (kB) to FILE.
PEAK_AT_EXIT = """
import atexit, sys
_out = sys.argv.pop(1)


def _peak():
    with open("/proc/self/status") as status, open(_out, "a") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")) + "\\n")


atexit.register(_peak)
del sys.argv[0]
with open(sys.argv[0], "rb") as _f:
    _code = compile(_f.read(), sys.argv[0], "exec")
exec(_code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__})
"""


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


def largest_code_run_kb(problem: str) -> int:
    """The largest peak RSS (kB) of the code runs of one `forward`, each as its own interpreter saw it."""
    original = subprocess.Popen

    class Measured(original):
        def __init__(self, args, *rest, **kwargs):
            if args[0] == sys.executable and args[-1] == "solution.py":  # sc_tir.run_code's interpreter
                args = [*args[:-1], "-c", PEAK_AT_EXIT, str(peaks), args[-1]]
            super().__init__(args, *rest, **kwargs)

    with tempfile.TemporaryDirectory(prefix="sc_tir_peaks_") as folder, \
            mock.patch.object(sc_tir.subprocess, "Popen", Measured):
        peaks = Path(folder) / "peaks"
        sc_tir.TaskAgent(MODEL).forward({"domain": "aime2025", "problem": problem})
        return max(int(kb) for kb in peaks.read_text().split())


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
        child = largest_code_run_kb(f"Problem {args.problems + 1}") / 1024  # untimed: its code runs are measured
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    code_run = int(sc_tir.run_code(OWN_PEAK_KB)) / 1024
    print(f"peak RSS: this process {own:.1f} MB, largest child {child:.1f} MB (VmHWM at exit), "
          f"a code run's own interpreter {code_run:.1f} MB (VmHWM)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
