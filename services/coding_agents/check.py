"""Which coding agents each sandbox backend can run here (`python -m services.sandbox check`): each agent
installed is asked its version inside a sandbox of each backend that works, with no network and no gateway,
as the meta step would start it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from services.coding_agents import coding_agent, meta_agent_names
from services.coding_agents.base import AGENTS_INSIDE, INSTALL_DIR, CodingAgent, Launch
from services.config import SandboxConfig
from services.errors import UserError
from services.meta_agent_names import is_coding_agent
from services.sandbox import Mount, open_sandbox

CHECK_TIMEOUT_S = 60.0


def agent_lines(backends: list[str], config: SandboxConfig | None = None) -> list[str]:
    """One line per coding agent: on which of `backends` (those that work here) it runs, or why not."""
    lines = []
    for name in (n for n in meta_agent_names() if is_coding_agent(n)):
        try:
            agent = coding_agent(name)
        except UserError as e:
            lines.append(f"{name}: {e}")
            continue
        if agent.program(INSTALL_DIR) is None:
            lines.append(f"{name}: not installed (python -m services.install --coding-agents)")
            continue
        runs = [f"{backend}: {runs_in(agent, backend, config or SandboxConfig())}" for backend in backends]
        lines.append(f"{name}: " + ("; ".join(runs) if runs else "installed, but no sandbox works here"))
    return lines


def runs_in(agent: CodingAgent, backend: str, config: SandboxConfig) -> str:
    """Whether `agent` prints its version in a sandbox of `backend`, in words."""
    with tempfile.TemporaryDirectory(prefix="agent-check-") as tmp:
        box = open_sandbox(config, Path(tmp), [Mount(INSTALL_DIR, AGENTS_INSIDE)], backend=backend)
        with box:
            launch = Launch(AGENTS_INSIDE, box.python, "none", "", "KEY", "", box.workdir, "/tmp", "/tmp")
            env = {**box.base_env(), **agent.command(launch).env}
            result = box.run(agent.version_argv(launch), env, timeout=CHECK_TIMEOUT_S)
    if result.ok:
        return f"runs ({(result.stdout.strip().splitlines() or [''])[0][:80]})"
    return f"does not run: {(result.stderr.strip().splitlines() or [result.why()])[-1][:160]}"
