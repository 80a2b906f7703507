"""mini-swe-agent (PyPI mini-swe-agent) as the meta agent: its `mini` command, run as a module of the
interpreter the sandbox already has (pip installs it and what it needs into the install folder's python/,
on its PYTHONPATH), its trajectory as the events.

It calls models through litellm in OpenAI's chat completions form, so it needs nothing of the gateway but
what the built-in meta agent uses: the model `openai/<meta model>` at the gateway's /v1 with the session
key. `--yolo --exit-immediately` run it without asking; its first-run set-up, start-up banner and cost
lookups (the gateway prices and books every call) are switched off by its own variables.
"""

from __future__ import annotations

from pathlib import Path

from services.coding_agents.base import PROMPT, Bundled, Command, Launch

VERSION = "2.4.6"
TRAJECTORY = "mini_trajectory.json"  # in the node's untrusted meta folder


class MiniSweAgent(Bundled):
    name = "mini-swe-agent"
    protocol = "chat"
    about = "mini-swe-agent (mini), through the gateway's OpenAI chat completions protocol"
    install = ("pip", f"mini-swe-agent=={VERSION}")
    calls = 30  # one bash command a call
    call_tokens = 8_000  # a short system prompt; the conversation grows with each command's output

    def program(self, installed: Path) -> Path | None:
        path = installed / "python" / "minisweagent" / "__init__.py"
        return path if path.is_file() else None

    def command(self, launch: Launch) -> Command:
        argv = [launch.python, "-m", "minisweagent.run.mini", "--model", f"openai/{launch.model}", "--task", PROMPT,
                "--yolo", "--exit-immediately", "--cost-limit", "0", "--output", f"{launch.out_dir}/{TRAJECTORY}",
                "--config", "mini.yaml", "--config", f"model.model_kwargs.base_url={launch.gateway_url}"]
        env = {"OPENAI_API_KEY": launch.key, "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1",
               "MSWEA_COST_TRACKING": "ignore_errors", "MSWEA_GLOBAL_CONFIG_DIR": f"{launch.home}/mini",
               "HOME": launch.home, "PYTHONPATH": f"{launch.installed}/python:{launch.workdir}"}
        return Command(argv, env, "mini-trajectory", TRAJECTORY, {"step_limit": "--config agent.step_limit="}, skip=3)

    def version_argv(self, launch: Launch) -> list[str]:
        return [launch.python, "-c", "import minisweagent; print('mini-swe-agent', minisweagent.__version__)"]


AGENT = MiniSweAgent()
