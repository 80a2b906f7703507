"""The quick start's first tries (docs/quickstart.md), timed: `python -m run_optimization --domain imo_grading
--preset quick`, or with `--demo` the first command of the README and the quick start, `python -m
run_optimization --preset demo`.

Runs that command as a new user would, with no provider key (so the bundled local model is what
runs, as the quick start's quick run says) and the sandbox `auto` chooses, in a fresh folder that
becomes its working directory (its `outputs/` and a `.env` it would read are that folder's, not
this checkout's). Prints the whole command's wall time and the CPU time of its whole process tree
(the model server included), how the run ended (nodes by status), the peak resident memory
(VmHWM, polled from /proc) of the controller, of the model server and summed over every process of
the tree (an upper bound: the peaks need not coincide), and the machine's load average before and
after: on a machine shared with other jobs the wall time grows with their load, the CPU time
hardly. docs/quickstart.md and configs/presets/quick.yaml (demo.yaml, with --demo) quote its wall time.

    python bench/quick_run.py [--repeat 1] [--demo]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness_throughput import MemoryPeaks, watch_memory  # noqa: E402

from services.providers import AUTO_MODELS  # noqa: E402

COMMAND = ["-m", "run_optimization", "--domain", "imo_grading", "--preset", "quick"]


def demo_command() -> list[str]:
    """The README's first command, the quick start's demo (the preset names its domain, examples/capitals)."""
    return ["-m", "run_optimization", "--preset", "demo"]


def run_once(folder: Path, command: list[str]) -> dict:
    keys = {key for names, _, _ in AUTO_MODELS for key in names}
    env = {k: v for k, v in os.environ.items() if k not in keys}
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    peaks = MemoryPeaks()
    load = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(folder / "console.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, *command], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        watcher = threading.Thread(target=watch_memory, args=(proc, peaks), daemon=True)
        watcher.start()
        returncode = proc.wait()
        watcher.join()
    wall = time.monotonic() - started
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process of the tree was waited for by its parent
    cpu_s = cpu.ru_utime + cpu.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    runs = sorted((folder / "outputs").glob("*/run.json"))
    nodes = sorted((runs[0].parent / "nodes").glob("*/node.json")) if runs else []
    statuses: dict[str, int] = {}
    for path in nodes:
        status = json.loads(path.read_text()).get("status", "?")
        statuses[status] = statuses.get(status, 0) + 1
    server = [pid for pid, cmd in peaks.cmd.items() if "local_serve.py" in cmd]
    return {
        "returncode": returncode, "wall_s": wall, "cpu_s": cpu_s, "statuses": statuses,
        "load": (load, os.getloadavg()[0]),
        "controller_mb": max((kb for pid, kb in peaks.peak_kb.items() if peaks.label.get(pid) == "harness"),
                             default=0) / 1024,
        "server_mb": max((peaks.peak_kb.get(pid, 0) for pid in server), default=0) / 1024,
        "sum_mb": sum(kb for pid, kb in peaks.peak_kb.items() if pid not in peaks.forks) / 1024,
        "tail": (folder / "console.log").read_text(errors="replace").splitlines()[-4:],
        "best": [line for line in (folder / "console.log").read_text(errors="replace").splitlines()
                 if line.startswith(("best node", "best vs initial"))],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs, one after the other, each in a fresh folder")
    ap.add_argument("--demo", action="store_true", help="time python -m run_optimization --preset demo instead")
    args = ap.parse_args()
    command = demo_command() if args.demo else COMMAND
    print(f"command  python {' '.join(command)}  (no provider key; {os.cpu_count()} CPUs)")
    failed = False
    for round_ in range(1, args.repeat + 1):
        with tempfile.TemporaryDirectory(prefix="quick_run_") as tmp:
            got = run_once(Path(tmp), command)
        minutes, seconds = divmod(round(got["wall_s"]), 60)
        nodes = ", ".join(f"{status} {count}" for status, count in sorted(got["statuses"].items()))
        print(f"run {round_}  wall {got['wall_s']:.0f} s ({minutes} min {seconds:02d} s), CPU {got['cpu_s']:.0f} s, "
              f"exit {got['returncode']}, nodes: {nodes or 'none'}")
        print(f"       load average {got['load'][0]:.1f} before, {got['load'][1]:.1f} after (on {os.cpu_count()} CPUs)")
        print(f"       peak RSS: controller {got['controller_mb']:.0f} MB, model server {got['server_mb']:.0f} MB, "
              f"all processes summed {got['sum_mb']:.0f} MB")
        for line in got["best"]:
            print(f"       {line}")
        if got["returncode"] != 0 or not got["statuses"]:
            failed = True
            print("       console's last lines:\n         " + "\n         ".join(got["tail"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
