"""A coding agent as a generation's meta agent (`--meta_agent claude-code|codex|mini-swe-agent|...`): what the
meta step mounts, writes and runs for it instead of inside/run_meta.py.

The agent's command (services/coding_agents/) and its default prompt and settings go into a folder of the
host's, mounted read-only at SPEC; the install folder of the npm agents at AGENTS_INSIDE, read-only too. The
trusted launcher (inside/run_coding_agent.py) reads the workspace's own prompt and settings, which earlier
generations may have edited (meta_agent/coding_agents/<name>/), runs the agent on the workspace and reads its
events into the node's meta transcript. The inputs and limits are the built-in meta agent's: the train rows,
the feedback, the try command, the meta session's call cap, the run's budget, loop.meta_timeout_s.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from services.coding_agents.base import AGENTS_INSIDE, INSTALL_DIR, PYTHON, CodingAgent, Launch
from services.config import GatewayConfig, LoopConfig
from services.fsutil import atomic_write_text, make_folder
from services.sandbox import Mount, Sandbox

SPEC = "/opt/coding_agent"  # the agent's command and default files, read-only inside
HOME = "/tmp/agent-home"  # the agent's own state: in the sandbox's private /tmp, gone with it
KEY_ENV = "AGENT_GATEWAY_KEY"  # the variable holding the meta session's key (domains.harness.worker_env)
CALL_MARGIN_S = 60.0  # beyond the gateway's own bound on a call: its queue for a connection, the reply's transfer


def files_of(agent: CodingAgent) -> str:
    """The agent's folder of prompt and settings in a workspace."""
    return f"meta_agent/coding_agents/{agent.name.replace('-', '_')}"


def call_timeout(loop: LoopConfig, gw: GatewayConfig) -> float:
    """How long one of the agent's model calls may take: as long as the gateway may take over it (each of its
    tries at the provider and the waits between them), and never longer than the meta agent's whole run."""
    gateway = (gw.max_retries + 1) * gw.request_timeout_s + gw.max_retries * gw.backoff_max_s
    return min(float(loop.meta_timeout_s), gateway + CALL_MARGIN_S)


def launch_of(box: Sandbox, model: str, out_dir: str, key: str = "", timeout_s: float = 900.0) -> Launch:
    """What the agent starts with in `box`, each model call allowed `timeout_s`; `key` is left out of what is
    written to the spec folder."""
    installed = AGENTS_INSIDE if box.isolated else str(INSTALL_DIR)
    return Launch(installed, PYTHON, model, box.gateway_url or "", KEY_ENV, key, box.workdir, HOME, out_dir,
                  timeout_s)


def write_spec(folder: Path, agent: CodingAgent, launch: Launch) -> None:
    """The agent's command (with no key in it: the key is only ever in the environment) and its default
    prompt and settings, for the launcher."""
    command = asdict(agent.command(launch))
    command.pop("env")
    make_folder(folder)
    atomic_write_text(folder / "command.json", json.dumps(command))
    atomic_write_text(folder / "prompt.md", agent.prompt)
    atomic_write_text(folder / "settings.json", json.dumps(agent.settings))


def mounts(folder: Path) -> list[Mount]:
    """The spec folder and, when there is one, the install folder of the npm agents."""
    return [Mount(folder, SPEC)] + ([Mount(INSTALL_DIR, AGENTS_INSIDE)] if INSTALL_DIR.is_dir() else [])


def argv(box: Sandbox, agent: CodingAgent, transcript: str, out_dir: str, max_calls: int,
         variables: dict[str, str]) -> list[str]:
    """The launcher's command line."""
    command = [box.python, box.trusted_script("run_coding_agent.py"), "--spec", SPEC, "--files", files_of(agent),
               "--repo", box.workdir, "--out", out_dir, "--transcript", transcript, "--max_calls", str(max_calls)]
    for name, value in variables.items():
        command += ["--var", f"{name}={value}"]
    return command


def environment(agent: CodingAgent, launch: Launch) -> dict[str, str]:
    """What the agent adds to the meta agent's environment (its base URL, key variables, quiet switches)."""
    return {**agent.command(launch).env, "HOME": HOME}
