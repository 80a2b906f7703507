"""Run a command-line coding agent as the meta agent, inside the sandbox.

    python run_coding_agent.py --spec /opt/coding_agent --files meta_agent/coding_agents/codex \
        --repo /workspace --out /out/node --transcript /out/node/meta_chat_history.md \
        --max_calls 40 --var feedback=/feedback --var data=/data --var iterations_left=3 --var try_command=...

The host wrote the agent's command (services/coding_agents: argv, its events' format and file, which
settings are flags) and its default prompt and settings into --spec. The prompt and settings the agent
runs with are the workspace's own (--files: prompt.md, settings.json), which earlier generations may have
edited, else the defaults. The agent's events go to AGENT_EVENTS in --out, and their reading to the meta
transcript (inside/agent_events.py); both stop at MAX_EVENTS, and an agent that writes more is killed
(exit 5), as one whose program is missing exits 3. Otherwise the exit code is the agent's, but 0 for one that
stopped at its turn limit (the built-in meta agent's run ends well at its call cap too).
"""

import argparse
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

if __package__:  # the host's inside.run_coding_agent (its tests)
    from inside.agent_events import line as read_line
    from inside.agent_events import mini, turn, turns_ran_out
else:  # run in the sandbox, where agent_events.py is mounted beside this file
    from agent_events import line as read_line
    from agent_events import mini, turn, turns_ran_out

AGENT_EVENTS = "agent_events.jsonl"  # the agent's own stream (or trajectory), in --out
MAX_EVENTS = 16 * 2**20  # bytes of the events, and of the transcript, kept
MAX_STDERR = 2**20  # bytes of the agent's stderr passed on
MAX_FILE = 64 * 1024  # the workspace's prompt or settings file read at most
MAX_LINE = 2**20  # bytes of one line of events read at once (a longer one is read in pieces)
MAX_VALUE = 500  # characters of one setting's value


def read_bytes(path: Path, limit: int) -> bytes | None:
    """A file the agent may have written: a regular file (no link followed, no fifo opened), its first
    `limit` + 1 bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else None


def workspace_text(path: Path) -> str | None:
    """The workspace's prompt or settings: UTF-8, at most MAX_FILE, else None (the default is used)."""
    data = read_bytes(path, MAX_FILE)
    try:
        return data.decode() if data is not None and len(data) <= MAX_FILE else None
    except UnicodeDecodeError:
        return None


def settings_of(text: str | None, default: dict) -> dict:
    try:
        value = json.loads(text) if text is not None else default
    except (ValueError, RecursionError):
        return default
    return value if isinstance(value, dict) else default


def flag_items(flag: str, value, max_calls: int) -> list[str]:
    """`flag` with `value` as argv items; an integer at most the run's call cap; nothing for a bad value."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        value = str(max(1, min(value, max_calls)))
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    elif not isinstance(value, (str, float)):
        return []
    value = str(value)
    if not value or len(value) > MAX_VALUE or not value.isprintable():
        return []
    *head, last = flag.split()
    return [*head, last + value] if last.endswith("=") else [*head, last, value]


def command_of(spec: dict, settings: dict, max_calls: int, prompt: str) -> list[str]:
    """The agent's argv: its settings' flags in, the prompt and the interpreter in place of their tokens."""
    argv = list(spec["argv"])
    flags = [item for key, flag in spec["settings_flags"].items() if key in settings
             for item in flag_items(flag, settings[key], max_calls)]
    argv[spec["skip"]:spec["skip"]] = flags
    tokens = {"{prompt}": prompt, "{python}": sys.executable or "python3"}
    return [tokens[item] if item in tokens else str(item) for item in argv]


class Sink:
    """A file written up to MAX_EVENTS; `full` once more was offered."""

    def __init__(self, path: Path) -> None:
        self.file, self.size, self.full = open(path, "w", encoding="utf-8", errors="replace"), 0, False

    def write(self, text: str) -> None:
        if self.size + len(text) > MAX_EVENTS:
            self.full = True
            return
        self.size += len(text)
        self.file.write(text)
        self.file.flush()


def pass_stderr(pipe) -> None:
    sent = 0
    for chunk in iter(lambda: pipe.read(8192), b""):
        if sent < MAX_STDERR:
            os.write(2, chunk[:MAX_STDERR - sent])
            sent += len(chunk)


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("--spec", "--files", "--repo", "--out", "--transcript"):
        ap.add_argument(name, required=True)
    ap.add_argument("--max_calls", type=int, required=True)
    ap.add_argument("--var", action="append", default=[], help="NAME=VALUE for {NAME} in the prompt")
    args = ap.parse_args()
    spec_dir, files = Path(args.spec), Path(args.repo) / args.files
    spec = json.loads((spec_dir / "command.json").read_text())
    prompt = workspace_text(files / "prompt.md") or (spec_dir / "prompt.md").read_text()
    for item in args.var:
        name, _, value = item.partition("=")
        prompt = prompt.replace("{" + name + "}", value)
    settings = settings_of(workspace_text(files / "settings.json"),
                           json.loads((spec_dir / "settings.json").read_text()))
    argv = command_of(spec, settings, args.max_calls, prompt)
    for folder in [os.environ.get("HOME", "/tmp"), *spec.get("folders", ())]:
        os.makedirs(folder, exist_ok=True)
    transcript = Sink(Path(args.transcript))
    transcript.write(turn("user", prompt))
    try:
        proc = subprocess.Popen(argv, cwd=args.repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as e:
        transcript.write(turn("error", f"the agent did not start: {e}"))
        print(f"the coding agent did not start: {e}", file=sys.stderr)
        return 3
    threading.Thread(target=pass_stderr, args=(proc.stderr,), daemon=True).start()
    stdin_prompt = "{prompt}" not in spec["argv"]
    threading.Thread(target=feed, args=(proc.stdin, prompt if stdin_prompt else ""), daemon=True).start()
    flooded, ran_out = follow(proc, spec, Path(args.out), transcript)
    code = proc.wait()
    if spec["events_file"] and not flooded:
        transcript.write(mini(read_trajectory(Path(args.out) / spec["events_file"])))
    if flooded:
        transcript.write(turn("error", f"killed: its events passed {MAX_EVENTS // 2**20} MiB"))
        print(f"the coding agent was killed: its events passed {MAX_EVENTS // 2**20} MiB", file=sys.stderr)
        return 5
    return 0 if ran_out else code


def feed(pipe, text: str) -> None:
    try:
        pipe.write(text.encode())
    except OSError:
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def follow(proc, spec: dict, out: Path, transcript: Sink) -> tuple[bool, bool]:
    """Copy the agent's stdout to AGENT_EVENTS and its reading to the transcript: (whether it flooded them,
    then it is killed; whether it said it stopped at its turn limit)."""
    events, ran_out = Sink(out / AGENT_EVENTS), False
    for raw in iter(lambda: proc.stdout.readline(MAX_LINE), b""):
        text = raw.decode("utf-8", "replace")
        events.write(text)
        if not spec["events_file"]:
            transcript.write(read_line(spec["events"], text.rstrip("\n")))
            ran_out = ran_out or turns_ran_out(spec["events"], text)
        if events.full or transcript.full:
            proc.kill()
            return True, ran_out
    return False, ran_out


def read_trajectory(path: Path) -> dict:
    data = read_bytes(path, MAX_EVENTS)
    try:
        value = json.loads(data[:MAX_EVENTS].decode("utf-8", "replace")) if data else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


if __name__ == "__main__":
    sys.exit(main())
