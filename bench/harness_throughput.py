"""Harness throughput: how close the sampling phase comes to workers-wide parallelism.

Runs `python -m domains.harness` as a subprocess against a FakeOpenAI server with a
fixed latency, so every second beyond `samples / workers * latency` is overhead of
ours (worker, gateway, litellm, dispatch), not of a provider. The sampling phase is
timed on the server's side, from the first chat request it receives to the last one
it answers, so interpreter start-up, data loading and the worker's imports are not
counted; the whole command's wall time is printed beside it.

Side by side, the same requests are then sent by the bare agent client (agent/llm.py, from
threads of one process, no harness, worker, sandbox or gateway) to a fresh fake server: the
client's own floor, printed as a ratio to the ideal and to the harness.

Peak memory is VmHWM from /proc/<pid>/status of the harness and of every descendant,
polled while the harness runs. The 400 MB target is the harness process's (it holds the
gateway); the agent's worker is another process, in the sandbox, with a target of its own
(80 MB: it imports no litellm), and the sum over all processes is printed too. A child seen
between fork and exec has its parent's command line and pages; it is left out of the sum,
and its peak restarts when it execs.

    python bench/harness_throughput.py --samples 100 --workers 10 --latency 0.2

With `--reference DIR` (a checkout of facebookresearch/HyperAgents), the reference's own
`domains/harness.py` runs the same rows against a fresh fake server of the same latency,
alternating with ours for `--repeat` runs each, and the medians of the whole command's wall
time are compared (target: ours / reference <= 0.8, both importing the litellm installed
here). The reference runs unchanged, in a temp
folder holding the same CSV at the path it reads (`./domains/imo/gradingbench<subset>.csv`),
with two things on its PYTHONPATH: `--reference_path` (its dependencies missing here, e.g.
`pip install --target DIR backoff hydra-core`) and a `sitecustomize.py` written by this bench
that only aliases the model its grading domain names (`gpt-o4-mini-genai`, which litellm
cannot route) to `openai/gpt-o4-mini-genai` once litellm is imported, so that OPENAI_API_BASE
sends its calls to the fake server.

    python bench/harness_throughput.py --reference /tmp/reference --reference_path /tmp/refdeps --repeat 3

With `--reference_litellm DIR` as well (a folder holding the litellm version the reference pins,
e.g. `pip install --target DIR --no-deps litellm==1.74.9`), each round also runs the reference with
that litellm first on its path, and its ratio is printed beside the other (no target: the two
harnesses then import different code).

With `--json`, one run prints one JSON object instead of the report (`result_json`: times,
peak RSS by process and the command lines seen), for a driver such as bench/before_after.py.

Exits non-zero only when a harness fails (non-zero exit, no run.json, or rows not
done); a missed target prints FAIL but exits 0.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.fake_openai import CHAT_PATHS, FakeOpenAI  # noqa: E402

REPLY = '<json>{"response": "Partial"}</json>'
RATIO_TARGET = 1.15  # sampling wall time / ideal
RSS_TARGET_MB = 400.0  # the harness process
WORKER_RSS_TARGET_MB = 80.0  # the agent's worker in its sandbox
POLL_S = 0.05  # seconds between /proc reads while the harness runs
RUN_ID = "bench"
TOTAL_TARGET = 0.8  # the whole command's wall time, ours / the reference's, with the same litellm
SUBSET_FILE = ROOT / "domains" / "imo" / "data" / "gradingbench_filtered_100_train.csv"  # our --subset train
REFERENCE_SUBSET = "_filtered_100_train"  # the reference's name for the same file
REFERENCE_MODEL = "gpt-o4-mini-genai"  # what the reference's imo_grading utils call
REFERENCE_TRIES = 3  # runs of the reference for one good one (see `reference_run`)


class TimedFakeOpenAI(FakeOpenAI):
    """FakeOpenAI that also notes when each completion is answered.

    `_completed` runs right before the reply is written, after the latency sleep, so
    its time is the answer's time to within the write of a few hundred bytes.
    """

    def __init__(self, *args, nagle: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.nagle = nagle  # keep Nagle's algorithm on the server's sockets, as the stock fake does
        self.answered_at: list[float] = []

    def start(self) -> TimedFakeOpenAI:
        super().start()
        # The stock handler writes headers and body in two sends, so Nagle can hold the
        # body until the client's delayed ACK: up to ~40 ms a call that a real provider
        # does not add and that would be billed to the harness. The handler class is
        # made per server, so this touches no other instance.
        self._httpd.RequestHandlerClass.disable_nagle_algorithm = not self.nagle
        # socketserver listens with a backlog of 5; ten connections opened at once can
        # overflow it and cost a 1 s SYN retry. Only the harness's own listener may.
        self._httpd.socket.listen(128)
        return self

    def _completed(self) -> None:
        super()._completed()
        with self._lock:
            self.answered_at.append(time.time())


@dataclass
class MemoryPeaks:
    """Peak resident set (kB) per process id, and what each process is."""

    peak_kb: dict[int, int] = field(default_factory=dict)
    label: dict[int, str] = field(default_factory=dict)
    cmd: dict[int, str] = field(default_factory=dict)  # command line when last seen
    forks: set[int] = field(default_factory=set)  # seen only between fork and exec

    def see(self, pid: int, cmd: str, is_harness: bool) -> None:
        """Note `pid`'s command line; a new one (first sight, or an exec since) restarts its peak."""
        if not cmd or self.cmd.get(pid) == cmd:  # empty: exiting, or gone
            return
        others = {c for p, c in self.cmd.items() if p != pid}
        self.cmd[pid] = cmd
        self.peak_kb.pop(pid, None)
        self.forks.discard(pid)
        if is_harness:
            self.label[pid] = "harness"
        elif cmd in others:  # a running process's command line: a fork that has not exec'd (yet)
            self.label[pid] = "fork"
            self.forks.add(pid)
        else:
            self.label[pid] = _label(cmd)


@dataclass
class Measurement:
    samples: int
    workers: int
    latency: float
    returncode: int
    run_meta: dict | None  # the harness's run.json, None when it wrote none
    requests: int  # chat requests the fake server received
    answered: int  # of which it answered with a completion
    first_request: float  # epoch seconds; 0.0 when no request came
    last_answer: float
    total_s: float  # the whole harness command, start to exit
    harness_pid: int
    memory: MemoryPeaks
    listen_overflows: int | None  # system-wide TCP backlog drops during the run
    log_tail: str
    messages: list  # each chat request's messages, as the provider received them
    bare_s: float | None = None  # the same requests from the bare agent client (`measure_bare`)
    bare_peak_kb: int = 0


def _status_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _label(cmd: str) -> str:
    """A short name for a process of the harness's tree, from its command line."""
    argv = cmd.split()
    names = [Path(a).name for a in argv[:2]]
    if names[0] == "bwrap":  # the sandbox; its arguments hold the command it runs
        return "bwrap"
    if "relay.py" in names:  # the relay runs a trusted script such as the worker in its own process
        scripts = [Path(a).stem for a in argv[argv.index("--") + 1:] if a.endswith(".py")] if "--" in argv else []
        return f"{scripts[0]}+relay" if scripts else "relay"
    if "worker.py" in names:
        return "worker"
    return " ".join(names)[:14]


def _children_of() -> dict[int, list[int]]:
    """Parent pid -> child pids, from one scan of /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses; fields resume after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(root: int) -> list[int]:
    tree = _children_of()
    found, stack = [], [root]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _cmdline(pid: int) -> str:
    """The command line, "" when the process is gone or exiting."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def watch_memory(proc: subprocess.Popen, peaks: MemoryPeaks) -> None:
    """Poll VmHWM of `proc` and its descendants until it exits.

    VmHWM is the kernel's own high-water mark, so a late poll still sees the peak;
    only growth in a process's last POLL_S before it exits can be missed.
    """
    while proc.poll() is None:
        for pid in [proc.pid, *_descendants(proc.pid)]:
            peaks.see(pid, _cmdline(pid), pid == proc.pid)
            hwm = _status_kb(pid, "VmHWM")
            if hwm is not None and pid in peaks.cmd:  # not a process seen only while it exited
                peaks.peak_kb[pid] = max(hwm, peaks.peak_kb.get(pid, 0))
        time.sleep(POLL_S)


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped because a listen backlog was full."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines, lines[1:]):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:]))
            return int(table["ListenOverflows"]) if "ListenOverflows" in table else None
    return None


def harness_command(samples: int, workers: int, output_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "domains.harness",
        "--domain", "imo_grading", "--subset", "train",
        "--num_samples", str(samples), "--num_workers", str(workers),
        "--model", "openai/fake", "--run_id", RUN_ID, "--output_dir", str(output_dir),
    ]


def harness_env(base_url: str) -> dict:
    env = dict(os.environ)
    env.update(
        OPENAI_API_BASE=base_url,
        OPENAI_API_KEY="sk-fake-bench-key",
        # litellm otherwise fetches its price map from the internet at import.
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    return env


def run_watched(cmd: list[str], env: dict, cwd: Path, log_path: Path) -> tuple[int, float, int, MemoryPeaks]:
    """Run `cmd` to its end with its output in `log_path`, polling its tree's memory:
    (exit code, wall seconds from start to exit, its pid, the peaks)."""
    peaks = MemoryPeaks()
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        watcher = threading.Thread(target=watch_memory, args=(proc, peaks), daemon=True)
        watcher.start()
        returncode = proc.wait()
        watcher.join()
    return returncode, time.monotonic() - started, proc.pid, peaks


def measure(samples: int, workers: int, latency: float, nagle: bool = False) -> Measurement:
    """Run the harness once against a fresh fake server and output folder."""
    with tempfile.TemporaryDirectory(prefix="harness_throughput_") as tmp, \
            TimedFakeOpenAI(latency=latency, nagle=nagle) as server:
        server.set_replies([REPLY])
        log_path = Path(tmp) / "harness.log"
        overflows_before = listen_overflows()
        returncode, total_s, pid, peaks = run_watched(harness_command(samples, workers, Path(tmp)),
                                                      harness_env(server.base_url), ROOT, log_path)
        overflows_after = listen_overflows()
        chats = [r for r in server.requests if r["path"] in CHAT_PATHS]
        arrivals = [r["time"] for r in chats]
        run_json = Path(tmp) / RUN_ID / "run.json"
        return Measurement(
            samples=samples, workers=workers, latency=latency, returncode=returncode,
            run_meta=json.loads(run_json.read_text()) if run_json.exists() else None,
            requests=len(arrivals), answered=server.count,
            first_request=min(arrivals, default=0.0), last_answer=max(server.answered_at, default=0.0),
            total_s=total_s, harness_pid=pid, memory=peaks,
            listen_overflows=None if None in (overflows_before, overflows_after)
            else overflows_after - overflows_before,
            log_tail=log_path.read_text(errors="replace")[-3000:],
            messages=[(r["json"] or {}).get("messages") for r in chats],
        )


# The reference's sitecustomize (see the module's docstring): litellm is not imported here,
# only aliased once the reference imports it, so the reference's start-up is its own.
REFERENCE_SHIM = f'''"""Written by bench/harness_throughput.py for the reference harness: aliases its model."""
import sys


class _AliasOnImport:
    def find_spec(self, name, path=None, target=None):
        if name != "litellm":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.model_alias_map[{REFERENCE_MODEL!r}] = {"openai/" + REFERENCE_MODEL!r}

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AliasOnImport())
'''


@dataclass
class ReferenceRun:
    returncode: int
    total_s: float
    rows: int  # predictions the reference wrote
    answered: int  # completions the fake server answered
    sampling_s: float | None  # first request received -> last answered
    peak_kb: int  # the reference's one process
    log_tail: str


def reference_command(ref_dir: Path, samples: int, workers: int, output_dir: Path) -> list[str]:
    return [
        sys.executable, str(ref_dir / "domains" / "harness.py"),
        "--domain", "imo_grading", "--subset", REFERENCE_SUBSET, "--agent_path", str(ref_dir / "task_agent.py"),
        "--num_samples", str(samples), "--num_workers", str(workers),
        "--output_dir", str(output_dir), "--run_id", RUN_ID,
    ]


def measure_reference(ref_dir: Path, extra_path: list[str], samples: int, workers: int, latency: float,
                      nagle: bool = False) -> ReferenceRun:
    """Run the reference's harness once on the same rows, against a fresh fake server of the same latency."""
    with tempfile.TemporaryDirectory(prefix="harness_throughput_ref_") as tmp, \
            TimedFakeOpenAI(latency=latency, nagle=nagle) as server:
        server.set_replies([REPLY])
        work = Path(tmp)
        data = work / "domains" / "imo"
        data.mkdir(parents=True)
        shutil.copyfile(SUBSET_FILE, data / f"gradingbench{REFERENCE_SUBSET}.csv")  # the same CSV columns
        (work / "shim").mkdir()
        (work / "shim" / "sitecustomize.py").write_text(REFERENCE_SHIM)
        env = harness_env(server.base_url)
        env["PYTHONPATH"] = os.pathsep.join([str(work / "shim"), *extra_path, str(ref_dir)])
        log_path = work / "reference.log"
        returncode, total_s, pid, peaks = run_watched(reference_command(ref_dir, samples, workers, work / "out"),
                                                      env, work, log_path)
        predictions = work / "out" / RUN_ID / "predictions.csv"
        rows = 0
        if predictions.exists():
            with open(predictions, newline="", encoding="utf-8") as f:
                rows = sum(1 for row in csv.DictReader(f) if row.get("prediction") not in (None, "", "None"))
        arrivals = [r["time"] for r in server.requests if r["path"] in CHAT_PATHS]
        sampling = max(server.answered_at) - min(arrivals) if arrivals and server.answered_at else None
        return ReferenceRun(returncode, total_s, rows, server.count, sampling, peaks.peak_kb.get(pid, 0),
                            log_path.read_text(errors="replace")[-3000:])


def reference_failure(r: ReferenceRun, samples: int) -> str | None:
    if r.returncode != 0:
        return f"the reference exited with {r.returncode}"
    if r.rows != samples or r.answered != samples:
        return f"the reference predicted {r.rows}/{samples} rows ({r.answered} calls answered)"
    return None


# Run in a fresh interpreter by `measure_bare`: the agent's client, the fake server as its gateway.
BARE_CLIENT = """
import json, os, sys
from concurrent.futures import ThreadPoolExecutor
os.environ["AGENT_GATEWAY_URL"] = sys.argv[2]
sys.path.insert(0, os.getcwd())
from agent.llm import get_response
with open(sys.argv[1]) as f:
    messages = json.load(f)
with ThreadPoolExecutor(int(sys.argv[3])) as pool:
    list(pool.map(lambda m: get_response(m, "fake"), messages))
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # kB: its peak RSS
"""


def measure_bare(messages: list, workers: int, latency: float) -> tuple[float, int] | None:
    """Sampling wall time of the same requests sent by `workers` threads of one process with the
    agent's client (agent/llm.py), straight to a fake provider: no harness, worker, sandbox or
    gateway. With the client's peak RSS (kB); None when a request failed."""
    with tempfile.TemporaryDirectory(prefix="harness_throughput_bare_") as tmp, \
            TimedFakeOpenAI(latency=latency) as server:
        server.set_replies([REPLY])
        path = Path(tmp) / "messages.json"
        path.write_text(json.dumps(messages))
        done = subprocess.run([sys.executable, "-c", BARE_CLIENT, str(path), server.base_url, str(workers)],
                              env=harness_env(server.base_url), cwd=ROOT, capture_output=True)
        arrivals = [r["time"] for r in server.requests if r["path"] in CHAT_PATHS]
        if done.returncode != 0 or server.count != len(messages):
            print(f"bare client run failed: {done.stderr.decode(errors='replace')[-500:]}", file=sys.stderr)
            return None
        return max(server.answered_at) - min(arrivals), int(done.stdout.split()[-1])


def rows_run(m: Measurement) -> int:
    """Rows the harness evaluated: a split shorter than --samples runs fewer."""
    return int(m.run_meta["rows"]) if m.run_meta else m.samples


def harness_failure(m: Measurement) -> str | None:
    if m.returncode != 0:
        return f"harness exited with {m.returncode}"
    if m.run_meta is None:
        return "harness wrote no run.json"
    if m.run_meta.get("done") != rows_run(m):
        return f"harness finished {m.run_meta.get('done')}/{rows_run(m)} rows ({m.run_meta.get('errors')} errors)"
    return None


def report(m: Measurement) -> list[str]:
    rows = rows_run(m)
    ideal = rows / m.workers * m.latency
    mb = {pid: kb / 1024 for pid, kb in m.memory.peak_kb.items()}
    harness_mb = mb.get(m.harness_pid, 0.0)
    combined = sum(v for pid, v in mb.items() if pid not in m.memory.forks)
    shorter = "" if rows == m.samples else f" (the split has {rows}; ideal uses {rows})"
    lines = [
        f"samples                 {m.samples}{shorter}",
        f"workers                 {m.workers}",
        f"latency                 {m.latency:.3f} s",
        f"ideal                   {ideal:.3f} s  (rows / workers x latency)",
        f"chat requests           {m.requests} received, {m.answered} answered",
    ]
    if m.answered and ideal > 0:
        sampling = m.last_answer - m.first_request
        ratio = sampling / ideal
        verdict = "PASS" if ratio <= RATIO_TARGET else "FAIL"
        lines += [
            f"sampling wall time      {sampling:.3f} s  (first request received -> last answered)",
            f"ratio                   {ratio:.3f}  target <= {RATIO_TARGET}: {verdict}",
        ]
        if m.bare_s:
            lines += [
                f"bare client             {m.bare_s:.3f} s  ratio {m.bare_s / ideal:.3f}  (the same requests, "
                f"{m.workers} threads of one process, no harness: the client's own floor)",
                f"harness / bare client   {sampling / m.bare_s:.3f}",
            ]
    else:
        lines.append("sampling wall time      n/a (no request answered)")
    lines.append(f"total command wall time {m.total_s:.3f} s")
    if m.listen_overflows is not None:
        lines.append(f"TCP listen overflows    {m.listen_overflows}  "
                     "(system-wide; each dropped connect waits ~1 s for a SYN retry)")
    verdict = "PASS" if 0 < harness_mb <= RSS_TARGET_MB else "FAIL"
    lines.append(f"peak RSS harness        {harness_mb:.1f} MB  (VmHWM, pid {m.harness_pid}) "
                 f"target <= {RSS_TARGET_MB:.0f} MB: {verdict}")
    for pid in sorted(p for p in mb if p != m.harness_pid):
        label = m.memory.label.get(pid, "?")
        note = "  not summed: a fork, on its parent's pages" if pid in m.memory.forks else ""
        if label.startswith("worker"):
            note = f"  target <= {WORKER_RSS_TARGET_MB:.0f} MB: {'PASS' if mb[pid] <= WORKER_RSS_TARGET_MB else 'FAIL'}"
        lines.append(f"peak RSS {label:<14} {mb[pid]:.1f} MB  (VmHWM, pid {pid}){note}")
    lines.append(f"peak RSS, all processes {combined:.1f} MB  (sum of each process's own peak)")
    if m.bare_peak_kb:
        lines.append(f"peak RSS bare client    {m.bare_peak_kb / 1024:.1f} MB  (getrusage, its own)")
    return lines


def result_json(m: Measurement) -> dict:
    """One run as data: the numbers of `report`, the peak RSS (MB) of the harness, of its worker and
    of all its processes, and every command line seen in its process tree."""
    mb = {pid: kb / 1024 for pid, kb in m.memory.peak_kb.items()}
    workers = [v for pid, v in mb.items() if m.memory.label.get(pid, "").startswith("worker")]
    return {
        "bench": "harness_throughput", "samples": m.samples, "rows": rows_run(m), "workers": m.workers,
        "latency": m.latency, "ideal_s": rows_run(m) / m.workers * m.latency,
        "requests": m.requests, "answered": m.answered,
        "sampling_s": m.last_answer - m.first_request if m.answered else None,
        "total_s": m.total_s, "bare_s": m.bare_s, "failure": harness_failure(m),
        "peak_rss_mb": {"harness": mb.get(m.harness_pid, 0.0), "worker": max(workers, default=0.0),
                        "all": sum(v for pid, v in mb.items() if pid not in m.memory.forks)},
        "commands": sorted(set(m.memory.cmd.values())),
    }


def _runs(seconds) -> str:
    return " ".join(f"{v:.2f}" for v in seconds)


def side_by_side(ours: list[Measurement], refs: list[ReferenceRun], pinned: list[ReferenceRun]) -> list[str]:
    """The medians of alternating runs of ours and the reference's, whole command and sampling; with
    `pinned` (runs of the reference on its own pinned litellm), that ratio too."""
    ours_total = statistics.median(m.total_s for m in ours)
    ref_total = statistics.median(r.total_s for r in refs)
    ratio = ours_total / ref_total
    verdict = "PASS" if ratio <= TOTAL_TARGET else "FAIL"
    lines = [
        f"side by side            {len(ours)} alternating runs each, medians",
        f"whole command, ours     {ours_total:.3f} s  (runs: {_runs(m.total_s for m in ours)})",
        f"whole command, ref.     {ref_total:.3f} s  (runs: {_runs(r.total_s for r in refs)})",
        f"ours / reference        {ratio:.3f}  target <= {TOTAL_TARGET}: {verdict}  (both on litellm "
        f"{importlib.metadata.version('litellm')})",
    ]
    if pinned:
        pinned_total = statistics.median(r.total_s for r in pinned)
        lines += [f"whole command, ref. pin {pinned_total:.3f} s  (runs: {_runs(r.total_s for r in pinned)})",
                  f"ours / ref. pinned      {ours_total / pinned_total:.3f}  (the reference on its pinned litellm)"]
    samplings = [r.sampling_s for r in refs if r.sampling_s]
    if samplings and all(m.answered for m in ours):
        ours_sampling = statistics.median(m.last_answer - m.first_request for m in ours)
        ref_sampling = statistics.median(samplings)
        lines.append(f"sampling, ours / ref.   {ours_sampling:.3f} s / {ref_sampling:.3f} s = "
                     f"{ours_sampling / ref_sampling:.3f}  (first request received -> last answered)")
    peak = max(r.peak_kb for r in refs) / 1024
    lines.append(f"peak RSS reference      {peak:.1f} MB  (VmHWM of its one process, highest run)")
    if pinned:
        lines.append(f"peak RSS ref. pinned    {max(r.peak_kb for r in pinned) / 1024:.1f} MB  "
                     "(the same, on its pinned litellm)")
    return lines


def compare(args) -> int:
    """Alternate ours and the reference's `args.repeat` times each (the order flips every round,
    so a drift of the machine's load falls on both), then report the medians."""
    ref_dir = Path(args.reference).resolve()
    if not (ref_dir / "domains" / "harness.py").is_file():
        print(f"--reference {args.reference}: no domains/harness.py there (a HyperAgents checkout)", file=sys.stderr)
        return 2
    extra = [str(Path(p).resolve()) for p in (args.reference_path or "").split(os.pathsep) if p]
    kinds = {"ref": extra}
    if args.reference_litellm:
        kinds["pinned"] = [str(Path(args.reference_litellm).resolve()), *extra]
    ours: list[Measurement] = []
    refs: dict[str, list[ReferenceRun]] = {kind: [] for kind in kinds}
    failed: list[str] = []  # why each failed run of the reference failed
    for round_ in range(args.repeat):
        order = ["ours", *kinds]
        for which in (order if round_ % 2 == 0 else order[::-1]):
            if which == "ours":
                m = measure(args.samples, args.workers, args.latency, nagle=args.fake_nagle)
                failure = harness_failure(m)
                if failure:
                    print(f"HARNESS FAILED: {failure}\n--- harness output (tail) ---\n{m.log_tail}", file=sys.stderr)
                    return 1
                ours.append(m)
                print(f"run {round_ + 1} ours       {m.total_s:.3f} s", flush=True)
            else:
                r = reference_run(ref_dir, kinds[which], args, failed)
                if r is None:
                    return 1
                refs[which].append(r)
                print(f"run {round_ + 1} {'reference' if which == 'ref' else 'ref. pin.'}  {r.total_s:.3f} s",
                      flush=True)
    median_run = sorted(ours, key=lambda m: m.total_s)[len(ours) // 2]
    if not args.no_bare:
        median_run.bare_s, median_run.bare_peak_kb = (measure_bare(median_run.messages, args.workers, args.latency)
                                                      or (None, 0))
    lines = ["ours, the run of median wall time:", *report(median_run),
             *side_by_side(ours, refs["ref"], refs.get("pinned", []))]
    if failed:
        lines.append(f"reference runs failed   {len(failed)}, each run again (last: {failed[-1]})")
    print("\n".join(lines), flush=True)
    return 0


def reference_run(ref_dir: Path, extra: list[str], args, failed: list[str]) -> ReferenceRun | None:
    """One good run of the reference, retried up to REFERENCE_TRIES times: its ten threads' first
    calls into litellm race on litellm's lazy set-up and a row's error ends its whole run (seen:
    "BaseModel cannot be instantiated directly"). Each failure is noted in `failed`; None, with
    its output printed, when every try failed."""
    for _ in range(REFERENCE_TRIES):
        r = measure_reference(ref_dir, extra, args.samples, args.workers, args.latency, args.fake_nagle)
        failure = reference_failure(r, args.samples)
        if failure is None:
            return r
        last_line = (r.log_tail.strip().splitlines() or [""])[-1][:160]
        failed.append(f"{failure}: {last_line}")
        print(f"reference run failed ({failure}); running it again", file=sys.stderr, flush=True)
    print(f"REFERENCE FAILED {REFERENCE_TRIES} times: {failure}\n--- its output (tail) ---\n{r.log_tail}",
          file=sys.stderr)
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=100, help="rows the harness evaluates")
    ap.add_argument("--workers", type=int, default=10, help="rows evaluated in parallel")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the fake provider takes per call")
    ap.add_argument("--fake_nagle", action="store_true",
                    help="leave Nagle on in the fake server, as tests/support/fake_openai.py ships")
    ap.add_argument("--no_bare", action="store_true",
                    help="skip the side-by-side run of the same requests from the bare agent client")
    ap.add_argument("--reference", metavar="DIR", default=None,
                    help="a HyperAgents checkout: time its harness on the same workload, alternating with ours")
    ap.add_argument("--reference_path", metavar="PATHS", default=None,
                    help="folders put on the reference's PYTHONPATH (its dependencies missing here)")
    ap.add_argument("--reference_litellm", metavar="DIR", default=None,
                    help="with --reference: a folder with the reference's pinned litellm, run as a third contender")
    ap.add_argument("--repeat", type=int, default=3, help="with --reference: runs of each, alternating")
    ap.add_argument("--json", action="store_true", help="print one run's numbers as one JSON object")
    args = ap.parse_args(argv)
    if args.reference:
        if args.json:
            ap.error("--json prints one run of ours; it does not go with --reference")
        if args.repeat < 1:
            ap.error("--repeat must be 1 or more")
        return compare(args)
    m = measure(args.samples, args.workers, args.latency, nagle=args.fake_nagle)
    if m.answered and not args.no_bare:
        m.bare_s, m.bare_peak_kb = measure_bare(m.messages, args.workers, args.latency) or (None, 0)
    print(json.dumps(result_json(m)) if args.json else "\n".join(report(m)), flush=True)
    failure = harness_failure(m)
    if failure:
        print(f"HARNESS FAILED: {failure}\n--- harness output (tail) ---\n{m.log_tail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
