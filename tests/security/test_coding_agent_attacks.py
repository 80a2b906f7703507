"""A coding agent as the meta agent is agent code like any other (issue 39): the program is ours, but what it
does is steered by a model and by the prompt and settings files earlier generations wrote. Each attack runs the
trusted launcher (inside/run_coding_agent.py) in a real sandbox of each backend, as the meta step does, with an
agent of the test's own whose command plays the hostile part: it reaches for the outside, floods its events,
hangs, or leaves prompt and settings files shaped to hang or steer the launcher; and its events, hostile text,
are read into the dashboard's transcript view."""

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from apps.dashboard import transcript as transcript_view
from apps.dashboard.reader import Text
from inside.agent_events import claude
from optimizer import agent_launch
from services.coding_agents.base import Command, Launch
from services.config import SandboxConfig
from services.sandbox import Mount, open_sandbox
from support.backends import BACKENDS

OUT = "/out/node"


class ScriptAgent:
    """An agent whose program is a Python script of the test's (run by the sandbox's interpreter)."""

    name = "script-agent"
    protocol = "chat"
    about = "a script"
    install = ("pip", "none")
    calls = 1
    call_tokens = 1
    prompt = "Edit {repo}."

    def __init__(self, script: str, settings: dict | None = None) -> None:
        self.script, self.settings = script, settings or {"max_turns": 5}

    def program(self, installed: Path) -> Path:
        return Path("/bin/sh")

    def command(self, launch: Launch) -> Command:
        return Command([launch.python, "-c", self.script, "{prompt}"], {}, "codex-jsonl",
                       settings_flags={"max_turns": "--turns", "note": "--note"}, skip=3)

    def version_argv(self, launch: Launch) -> list[str]:
        return ["true"]


def run_agent(tmp_path: Path, backend: str, agent: ScriptAgent, timeout: float = 60, files: dict | None = None):
    """The launcher run on a fresh workspace (with `files` under the agent's folder of it), as the meta step
    runs it; its RunResult and the node's meta folder on the host."""
    workspace, out, spec = tmp_path / "ws", tmp_path / "out", tmp_path / "spec"
    folder = workspace / agent_launch.files_of(agent)
    folder.mkdir(parents=True)
    out.mkdir()
    for name, make in (files or {}).items():
        make(folder / name)
    box = open_sandbox(SandboxConfig(), workspace, [Mount(out, OUT, writable=True), *agent_launch.mounts(spec)],
                       backend=backend)
    agent_launch.write_spec(spec, agent, agent_launch.launch_of(box, "m", OUT))
    with box:
        argv = agent_launch.argv(box, agent, f"{OUT}/meta_chat_history.md", OUT, 40, {"repo": box.workdir})
        result = box.run(argv, {**box.base_env(), "HOME": agent_launch.HOME}, timeout=timeout)
    return result, out


REACH = """
import json, socket, sys
port = int(sys.argv[-1].split('PORT=')[1].split()[0])
for host, p in (('1.1.1.1', 443), ('127.0.0.1', port), ('::1', port), ('api.anthropic.com', 443)):
    try:
        socket.create_connection((host, p), timeout=3).close()
        said = 'reached'
    except OSError as e:
        said = type(e).__name__
    print(json.dumps({'type': 'item.completed', 'item': {'type': 'agent_message', 'text': f'{host} {said}'}}))
"""


@pytest.mark.attack("coding agent: reaches for the outside from its sandbox (a provider's address by IP and by "
                    "name, a listener on the host's loopback, IPv4 and IPv6)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_coding_agent_reaches_nothing_outside(tmp_path, backend):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    accepted = []

    def accept() -> None:
        try:
            accepted.append(listener.accept())
        except OSError:
            pass

    waiter = threading.Thread(target=accept)
    waiter.start()
    port = listener.getsockname()[1]
    agent = ScriptAgent(REACH)
    agent.prompt = f"Edit {{repo}}. PORT={port} "
    result, out = run_agent(tmp_path, backend, agent)
    waiter.join()
    listener.close()
    text = (out / "meta_chat_history.md").read_text()
    assert result.returncode == 0, result.stderr[-2000:]
    assert text.count("## assistant") == 4 and "reached" not in text, text
    assert not accepted


@pytest.mark.attack("coding agent: floods its event stream and its stderr without end")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_flooding_coding_agent_is_killed_at_the_cap(tmp_path, backend):
    script = ("import os, threading\n"
              "flood = lambda: [os.write(2, b'E' * 65536) for _ in iter(int, 1)]\n"
              "threading.Thread(target=flood, daemon=True).start()\n"
              "line = b'{\"type\": \"item.completed\", \"item\": {\"type\": \"agent_message\", \"text\": \"' + "
              "b'A' * 60000 + b'\"}}\\n'\n"
              "while True: os.write(1, line)\n")
    result, out = run_agent(tmp_path, backend, ScriptAgent(script), timeout=120)
    assert result.returncode == 5 and not result.timed_out, result.why()
    assert "killed: its events passed 16 MiB" in result.stderr
    assert (out / "agent_events.jsonl").stat().st_size <= 16 * 2**20
    assert (out / "meta_chat_history.md").stat().st_size <= 16 * 2**20 + 2**16
    assert len(result.stderr) <= 2 * 2**20  # the launcher passes 1 MiB of the agent's stderr on


@pytest.mark.attack("coding agent: hangs, ignoring SIGTERM, and leaves a child running")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hanging_coding_agent_is_killed_at_the_time_limit(tmp_path, backend):
    script = ("import os, signal, subprocess, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "subprocess.Popen(['sleep', '1000'])\ntime.sleep(1000)\n")
    result, _ = run_agent(tmp_path, backend, ScriptAgent(script), timeout=3)
    assert result.timed_out and result.seconds < 30, result.why()
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            left += [cmdline] if cmdline.read_bytes() == b"sleep\x001000\x00" else []
        except OSError:
            pass
    assert not left  # the child went with the sandbox


SETTINGS = "import sys, json\nprint(json.dumps({'type': 'item.completed', 'item': {'type': 'agent_message', " \
           "'text': repr(sys.argv[1:])}}))\n"


@pytest.mark.attack("coding agent: its workspace's prompt.md a fifo and settings.json a link to a host file; "
                    "then settings with a turn limit of 10**12 and a flag value carrying a newline and an option")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_coding_agents_files_cannot_hang_or_steer_the_launcher(tmp_path, backend):
    result, out = run_agent(tmp_path / "a", backend, ScriptAgent(SETTINGS), files={
        "prompt.md": lambda p: os.mkfifo(p), "settings.json": lambda p: p.symlink_to("/etc/passwd")})
    assert result.returncode == 0, result.stderr[-2000:]
    text = (out / "meta_chat_history.md").read_text()
    assert "## user\n\nEdit /workspace." in text and "['--turns', '5', " in text  # the defaults
    hostile = {"max_turns": 10**12, "note": "x\n--dangerously-skip-permissions"}
    result, out = run_agent(tmp_path / "b", backend, ScriptAgent(SETTINGS), files={
        "settings.json": lambda p: p.write_text(json.dumps(hostile)),
        "prompt.md": lambda p: p.write_text("Mine: {repo}")})
    text = (out / "meta_chat_history.md").read_text()
    assert "## user\n\nMine: /workspace" in text
    assert "['--turns', '40', 'Mine: /workspace']" in text  # capped at the call cap; the bad value dropped


@pytest.mark.attack("coding agent: events whose tool names, texts and results hold markup and script, read into "
                    "the dashboard's meta transcript")
def test_a_coding_agents_events_are_shown_as_text():
    events = [{"type": "assistant", "message": {"content": [
        {"type": "text", "text": "<script>alert(1)</script>\x1b]0;PWNED\x07"},
        {"type": "tool_use", "name": "<img src=x onerror=alert(2)>", "input": {"cmd": "</pre><b>"}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "is_error": True,
                                                  "content": "<iframe src=javascript:alert(3)>"}]}}]
    markdown = "".join(claude(e) for e in events)
    page = str(transcript_view.block(Text(markdown)))
    assert "<script>" not in page and "<img" not in page and "<iframe" not in page and "</pre><b>" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert 'class="turn failed"' in page  # the failed tool call is marked as the built-in agent's are
