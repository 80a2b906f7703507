"""What a command-line coding agent is to this project: how it is started inside a sandbox, which of the
gateway's protocols it speaks, where its event stream goes, and what it costs a generation.

One object of the `CodingAgent` shape is all an agent needs (the three bundled ones are a file each, and a
plug-in's is a file too, named by an entry point in the group `hyperagents_imo.meta_agents`). Its `command`
is pure: from a `Launch` (paths and values as code inside the sandbox sees them) it makes the argv and the
environment, and the trusted launcher (inside/run_coding_agent.py) fills in the prompt, adds the settings'
flags, runs it and turns its events into the meta transcript. Nothing here reads what agent code wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ("chat", "messages", "responses")  # the gateway's inbound protocols (services/gateway/inbound/)
# How the launcher reads an agent's event stream into the meta transcript (inside/agent_events.py).
EVENT_FORMATS = ("claude-stream-json", "codex-jsonl", "mini-trajectory", "text")
PROMPT = "{prompt}"  # an argv item the launcher replaces with the prompt's text
PYTHON = "{python}"  # an argv item the launcher replaces with its own interpreter
INSTALL_DIR = PROJECT_ROOT / ".coding_agents"  # where `python -m services.install --coding-agents` puts npm packages
AGENTS_INSIDE = "/opt/coding_agents"  # INSTALL_DIR as the sandbox sees it, read-only
AGENT_FILES = PROJECT_ROOT / "meta_agent" / "coding_agents"  # the bundled agents' prompt and settings files


@dataclass(frozen=True)
class Launch:
    """What an agent is started with, as code inside the sandbox sees it."""

    installed: str  # the install folder (AGENTS_INSIDE, or INSTALL_DIR where paths are the host's)
    python: str  # the interpreter inside (PYTHON, which the launcher replaces; its packages hold pip's agents)
    model: str  # the run's meta model, the one model its session key may call
    gateway_url: str  # the gateway's OpenAI-style base URL, ending in /v1
    key_env: str  # the variable that holds its session key (the launcher's environment has it)
    key: str  # the session key itself: some agents take it only from their own variable
    workdir: str  # the workspace it edits
    home: str  # a writable folder for its own state (config, caches), gone with the sandbox
    out_dir: str  # the node's untrusted meta folder, where an events file of its own goes
    call_timeout_s: float = 900.0  # how long one model call through the gateway may take (agent_launch.call_timeout)
    retries: int = 2  # how often it may retry a failed call: the gateway already retried the provider's failures


@dataclass(frozen=True)
class Command:
    """How to start the agent: argv (PROMPT where the prompt goes; without it the prompt is its stdin), the
    variables it adds to the launcher's environment, where its events are, and which settings become flags
    (put after argv[:skip], each `flag value`; a flag ending in = takes the value in the same item, a list
    is joined with commas)."""

    argv: list[str]
    env: dict[str, str]
    events: str  # one of EVENT_FORMATS
    events_file: str | None = None  # where it writes its transcript; None: its stdout
    settings_flags: dict[str, str] = field(default_factory=dict)  # a settings.json key -> the flag it becomes
    skip: int = 1  # the settings' flags go after this many items of argv (the program, a subcommand)
    folders: tuple[str, ...] = ()  # folders the launcher makes before it starts the agent (its state's)


@runtime_checkable
class CodingAgent(Protocol):
    """A coding agent the meta step can run (`--meta_agent NAME`)."""

    name: str  # letters, digits and - (the name of --meta_agent)
    protocol: str  # one of PROTOCOLS
    about: str  # one line for --help, the plan and `services.sandbox check`
    install: tuple[str, str]  # ("npm", package@version) or ("pip", requirement): what --coding-agents installs
    calls: int  # model calls a generation of it typically makes (the estimate)
    call_tokens: int  # prompt tokens of a typical call (a coding agent resends its long context each turn)
    prompt: str  # its default instructions, with {repo} {feedback} {data} {iterations_left} {try_command}
    settings: dict  # its default settings (settings.json): max_turns, tools, ...

    def program(self, installed: Path) -> Path | None:
        """Its program on this host, under `installed` (INSTALL_DIR) or the interpreter's packages; None
        when it is not installed."""
        ...

    def command(self, launch: Launch) -> Command: ...

    def version_argv(self, launch: Launch) -> list[str]:
        """A command that prints its version inside the sandbox (`python -m services.sandbox check`)."""
        ...


def bundled_text(name: str, file: str) -> str:
    """A bundled agent's default file (meta_agent/coding_agents/<name>/<file>), the project's own."""
    return (AGENT_FILES / name.replace("-", "_") / file).read_text(encoding="utf-8")


class Bundled:
    """A bundled agent: its default prompt and settings (meta_agent/coding_agents/<name>/), read when it is made;
    a run reads the workspace's copies, which the meta agent may have edited."""

    name: str

    def __init__(self) -> None:
        self.prompt = bundled_text(self.name, "prompt.md")
        self.settings = json.loads(bundled_text(self.name, "settings.json"))


def npm_program(installed: Path, *parts: str) -> Path | None:
    """A program an npm package installed under `installed` (node_modules/...), when it is there."""
    path = installed.joinpath("node_modules", *parts)
    return path if path.is_file() and path.stat().st_mode & 0o111 else None
