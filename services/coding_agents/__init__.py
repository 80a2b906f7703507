"""The meta agents a run can choose (`--meta_agent NAME`, `models.meta_agent`).

`builtin` and `paper` are agent code in the workspace, run by inside/run_meta.py: the project's meta agent,
or the HyperAgents reference's (optimizer/initial_agents.py: the `paper` one is the reference's agent code,
as `--initial_agent paper` and `loop.initial_meta_agent: paper` start from). The others are command-line
coding agents (services/coding_agents/base.py's `CodingAgent`): the three bundled here, one file each, and
those installed plug-ins name in the entry point group `hyperagents_imo.meta_agents`. Names are listed
without importing a plug-in (the config's validation and --help read them); `coding_agent` loads one.
"""

from __future__ import annotations

import importlib
from functools import cache

from services.coding_agents.base import EVENT_FORMATS, INSTALL_DIR, PROTOCOLS, CodingAgent
from services.errors import UserError
from services.meta_agent_names import BUNDLED, GROUP, IN_WORKSPACE, is_coding_agent, meta_agent_names, plugin_points

INSTALL_HINT = "python -m services.install --coding-agents"


@cache
def coding_agent(name: str) -> CodingAgent:
    """The coding agent called `name`, loaded once; a name none has, or a plug-in that does not load or
    lacks what an agent has, is one line (UserError)."""
    if name in BUNDLED:
        return importlib.import_module(f"services.coding_agents.{BUNDLED[name]}").AGENT
    points = [p for p in plugin_points() if p.name == name]
    if not points:
        raise UserError(f"meta agent {name!r} is none of this project's or an installed plug-in's "
                        f"(known: {', '.join(meta_agent_names())})")
    where = f"meta agent plug-in {name} ({points[0].value}, entry point group {GROUP})"
    try:
        value = points[0].load()
        value = value() if isinstance(value, type) else value
        problem = shape_problem(value)
    except (Exception, SystemExit) as e:  # a plug-in is someone's code: anything may go wrong in it
        raise UserError(f"{where} does not load: {type(e).__name__}: {str(e)[:200]}") from None
    if problem:
        raise UserError(f"{where}: {problem}")
    return value


def shape_problem(agent: object) -> str | None:
    """What `agent` lacks of a CodingAgent, in words; None when it has it all."""
    if not isinstance(agent, CodingAgent):
        return (f"{type(agent).__name__} lacks what a coding agent has (name, protocol, about, install, calls, "
                "call_tokens, prompt, settings, program(installed), command(launch))")
    if getattr(agent, "protocol", None) not in PROTOCOLS:
        return f"its protocol is {str(agent.protocol)[:40]!r}, not one of {', '.join(PROTOCOLS)}"
    if not isinstance(agent.prompt, str) or not isinstance(agent.settings, dict):
        return "its prompt is not text or its settings not a mapping"
    return None


def missing_line(name: str) -> str | None:
    """None when coding agent `name` is installed here, else the one line saying how to install it."""
    agent = coding_agent(name)
    if agent.program(INSTALL_DIR) is not None:
        return None
    return f"the meta agent {name} is not installed: run {INSTALL_HINT}"


def require_meta_agent(name: str, executor: str = "local", backend: str = "auto", installed: bool = True) -> None:
    """Stop a run whose meta agent is a coding agent that does not load or (with `installed`) is not installed, in
    one line; or one on the Ray executor, whose nodes get their mounts as copies (the install folder is hundreds
    of MB); or one without a sandbox (`--sandbox none`), where the agent, its permission checks off, would run
    commands on this host with its network open. A dry run asks all but the install: its plan is what would run."""
    if not is_coding_agent(name):
        return
    if backend == "none":
        raise UserError(f"--meta_agent {name} runs in a sandbox only (bwrap or docker): under --sandbox none it "
                        "would run commands on this host, its own permission checks off; drop --sandbox none")
    if installed and (problem := missing_line(name)):
        raise UserError(problem)
    if executor == "ray":
        raise UserError(f"--meta_agent {name} runs on this machine's sandboxes only (the Ray executor would copy "
                        "its install folder to a node every generation); drop --executor ray")


__all__ = ["BUNDLED", "EVENT_FORMATS", "GROUP", "INSTALL_HINT", "IN_WORKSPACE", "coding_agent", "is_coding_agent",
           "meta_agent_names", "missing_line", "require_meta_agent"]
