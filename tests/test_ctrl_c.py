"""Ctrl-C at random moments of runs (issue 37): each run ends within EXIT_S of it, with exit code 130 and one
`interrupted:` line, and leaves its RUN/.lock free; the command that line gives resumes a run to its end.

A run on the local model used to hang after its `interrupted:` line, holding RUN/.lock: the interpreter's
teardown froze a gateway thread in the middle of an import (litellm's error mapping imports fastapi once
the model's server is gone under a request in flight), and litellm's `AsyncHTTPHandler.__del__`, importing
as the teardown finalized it, waited on that import's lock for good. `services.errors.exit_on_user_error`
now ends such a process without the teardown.

Runs are forked from one process that imported litellm and the project once (FORK_SERVER): a start of
`python -m run_optimization` costs 3 to 4 s of CPU, 50 of them more than this test may take on 2 cores.
Each forked run executes run_optimization as `python -m` does (`runpy`, as `__main__`) in a process group
of its own, and Ctrl-C is a SIGINT to that group, as a terminal sends it.
"""

import fcntl
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.errors import UserError
from services.local_model import weights_path
from services.providers import LOCAL_DEFAULT
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env
from support.scripted_loop import events, nodes, tool_call

PRESSES = 50
EXIT_S = 10.0  # from the SIGINT to the end of the process
LOCAL_PRESSES = 6  # of PRESSES, on the local model when it is installed (one at a time: it takes a core)
AT_ONCE = 4  # runs at once: the local model's lane and three others
FAKE_SPAN_S = 8.0  # a run on the fake provider is pressed this long at most after its first line
LOCAL_SPAN_S = 15.0  # the local model's server starts first (seconds), then its rows take seconds each
HUNG_S = 40.0  # after the SIGINT, a run still alive is killed (and the test fails)

FORK_SERVER = r"""
import json, os, runpy, select, sys, time

import litellm  # noqa: F401 - what every run imports first, paid here once
import matplotlib
import run_optimization  # noqa: F401

# What a run has imported once it drew its pictures (every loop.pictures_every_s), which it draws again as it
# stops: a run of more than seconds pays for them before its Ctrl-C, not after.
matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402, F401
import apps.report  # noqa: E402, F401

def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        print(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status), "at": time.monotonic()}),
              flush=True)

pending = b""
while True:
    ready, _, _ = select.select([0], [], [], 0.02)
    reap()
    if not ready:
        continue
    data = os.read(0, 65536)
    if not data:
        break
    pending += data
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)  # a job of its own, as a shell starts a command
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.environ.clear()
            os.environ.update(job["env"])
            sys.argv = ["run_optimization", *job["argv"]]
            # As `python -m run_optimization`: an exception that ends it (a SystemExit) leaves this loop, and
            # the interpreter exits as that command's would.
            runpy.run_module("run_optimization", run_name="__main__", alter_sys=True)
            sys.exit(0)
        print(json.dumps({"started": pid}), flush=True)
"""


class ForkServer:
    """FORK_SERVER in a process of its own: `start` forks a run and gives its pid; `ended` its exit code and
    the time.monotonic() it ended at (the same clock in every process of this machine)."""

    def __init__(self, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER], cwd=REPO_ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._started: list[int] = []
        self._exits: dict[int, tuple[int, float]] = {}
        self._changed = threading.Condition()
        self._one_start = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "started" in message:
                    self._started.append(message["started"])
                else:
                    self._exits[message["exited"]] = (message["code"], message["at"])
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def start(self, argv: list[str], env: dict, log: Path) -> int:
        with self._one_start:
            with self._changed:
                seen = len(self._started)
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "log": str(log)}) + "\n")
            self.proc.stdin.flush()
            with self._changed:
                assert self._changed.wait_for(lambda: len(self._started) > seen or self.proc.poll() is not None,
                                              timeout=120), "the fork server did not fork"
                assert self.proc.poll() is None, "the fork server ended"
                return self._started[seen]

    def ended(self, pid: int, timeout: float) -> tuple[int, float] | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits, timeout=max(0.0, timeout))
            return self._exits.get(pid)

    def close(self) -> None:
        """End the fork server, and first every run still going (a failed test's), which would go on alone."""
        with self._changed:
            going = [pid for pid in self._started if pid not in self._exits]
        for pid in going:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Press:
    index: int
    local: bool
    moment: float  # seconds after the run's first line
    log: Path
    run_dir: Path
    code: int | None = None
    took: float | None = None  # from the SIGINT to the end of the process
    notes: list[str] = field(default_factory=list)

    def told(self, seed: int) -> str:
        model = "the local model" if self.local else "the fake provider"
        tail = self.log.read_text(errors="replace")[-2500:] if self.log.exists() else "(no output)"
        return (f"replay with CTRL_C_SEED={seed}: press {self.index} on {model}, {self.moment:.2f} s after its "
                f"first line: exit code {self.code}, {self.took if self.took is None else round(self.took, 2)} s "
                f"after its SIGINT; {' '.join(self.notes)}\n--- its output's end:\n{tail}")


def local_model_installed() -> bool:
    try:
        weights_path(LOCAL_DEFAULT)
    except UserError:
        return False
    return True


def meta_and_task(request: dict) -> str:
    """The fake provider: the meta agent appends a line to the task agent (each generation a new child to
    evaluate), the task agent grades every proof incorrect."""
    messages = request["messages"]
    opening = " ".join(str(m["content"]) for m in messages[:2])
    if "/workspace" in opening and "/feedback" in opening:
        if any(m["role"] == "assistant" for m in messages):
            return "Done: the change is in place."
        note = f"# note {random.randrange(10**9)}"
        return tool_call({"tool_name": "bash", "tool_input": {
            "command": f"echo '{note}' >> /workspace/task_agent/task_agent.py"}})
    return '<json>{"response": "incorrect"}</json>'


def press(server: ForkServer, item: Press, argv: list[str], env: dict, seed: int) -> Press:
    """Start a run, press Ctrl-C `item.moment` after its first line, and keep how it ended."""
    pid = server.start(argv, env, item.log)
    deadline = time.monotonic() + 120
    while not (item.log.exists() and item.log.stat().st_size) and time.monotonic() < deadline:
        if server.ended(pid, 0.02) is not None:
            break
    time.sleep(item.moment)
    early = server.ended(pid, 0)
    if early is not None:
        item.code = early[0]
        item.notes.append("it ended before its Ctrl-C")
        return item
    pressed = time.monotonic()
    os.killpg(pid, signal.SIGINT)
    ended = server.ended(pid, EXIT_S)
    if ended is None:
        dump = shutil.which("py-spy")
        if dump:
            stacks = subprocess.run([dump, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
            found = stacks.stdout.find("\nThread ")  # after the header, which quotes FORK_SERVER whole
            item.notes.append(f"its stacks {EXIT_S:g} s after the SIGINT:{stacks.stdout[found:]}{stacks.stderr}")
        ended = server.ended(pid, HUNG_S - EXIT_S)
    if ended is None:
        item.notes.append(f"still running {HUNG_S:g} s after its SIGINT: killed")
        os.killpg(pid, signal.SIGKILL)
        ended = server.ended(pid, 60)
        assert ended is not None, item.told(seed)
    item.code, item.took = ended[0], ended[1] - pressed
    return item


def lock_is_free(run_dir: Path) -> bool:
    """Whether another process can take the run's lock (as services.fsutil.hold_folder does: an flock)."""
    path = run_dir / ".lock"
    if not path.exists():
        return True
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.mark.e2e
def test_ctrl_c_at_50_random_moments_ends_each_run_within_10_s_with_its_lock_free_and_a_resume_finishes(
        tmp_path, fake_openai):
    seed = int(os.environ.get("CTRL_C_SEED") or random.SystemRandom().randrange(10**6))
    rng = random.Random(seed)
    fake_openai.set_responder(meta_and_task)
    fake_openai.latency = 0.1  # calls in flight at most moments
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  meta_timeout_s: 120\n")
    fake_env = cli_env(fake_openai)
    local_env = {k: v for k, v in fake_env.items() if not k.startswith("OPENAI_")}
    local = LOCAL_PRESSES if local_model_installed() else 0
    kinds = [True] * local + [False] * (PRESSES - local)
    rng.shuffle(kinds)
    items = [Press(i, is_local, rng.uniform(0, LOCAL_SPAN_S if is_local else FAKE_SPAN_S), tmp_path / f"{i}.log",
                   tmp_path / f"out{i}" / "run") for i, is_local in enumerate(kinds)]

    def argv(item: Press) -> list[str]:
        models = [LOCAL_DEFAULT] * 2 if item.local else ["openai/fake", "openai/fake-meta"]
        return ["--domain", "imo_grading", "--output_dir", str(item.run_dir.parent), "--run_id", "run",
                "--task_model", models[0], "--meta_model", models[1], "--config", str(config),
                "--max_generation", "1000", "--eval_samples", "4", "--eval_workers", "2"]

    started = time.monotonic()
    server = ForkServer(fake_env)
    try:
        # The local model's runs one after another in a lane of their own (its server takes a core).
        with ThreadPoolExecutor(AT_ONCE) as pool:
            lane = pool.submit(lambda: [press(server, i, argv(i), local_env, seed) for i in items if i.local])
            others = pool.map(lambda item: press(server, item, argv(item), fake_env, seed),
                              [item for item in items if not item.local])
            done = sorted([*lane.result(), *others], key=lambda item: item.index)
        pressed_s = time.monotonic() - started
        for item in done:
            told = item.told(seed)
            assert item.code == 130 and item.took is not None and item.took <= EXIT_S, told
            output = item.log.read_text(errors="replace").splitlines()
            assert sum(line.startswith("interrupted:") for line in output) == 1, told
            assert lock_is_free(item.run_dir), told

        # The command the line gives, asked for one generation more than the run started, ends the run.
        resumable = [item for item in done if not item.local and (item.run_dir / "run.json").exists()]
        assert resumable, f"CTRL_C_SEED={seed}: no run got as far as its run.json"
        item = rng.choice(resumable)
        [line] = [line for line in item.log.read_text().splitlines() if line.startswith("interrupted:")]
        command = shlex.split(line.split("to continue: ", 1)[1])
        last = 1 + max((int(e["node_id"]) for e in events(item.run_dir)
                        if e["event"] == "gen_start" and e["node_id"].isdigit()), default=0)
        log = tmp_path / "resume.log"
        pid = server.start([*command[command.index("run_optimization") + 1:], "--max_generation", str(last)],
                           fake_env, log)
        ended = server.ended(pid, 300)
        told = f"CTRL_C_SEED={seed}: resume of press {item.index}:\n{log.read_text(errors='replace')[-3000:]}"
        assert ended is not None and ended[0] == 0, told
        assert "run finished" in log.read_text(), told
        assert set(nodes(item.run_dir)) == {"initial", *map(str, range(1, last + 1))}, told
        assert lock_is_free(item.run_dir), told
    finally:
        server.close()
    took = [round(item.took, 1) for item in done if item.took is not None]
    print(f"CTRL_C_SEED={seed}: {len(done)} presses ({local} on the local model) in {pressed_s:.0f} s, the resume "
          f"in {time.monotonic() - started - pressed_s:.0f} s; seconds from each SIGINT to the end: {sorted(took)}")
