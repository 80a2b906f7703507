"""Codex (npm @openai/codex) as the meta agent: `codex exec`, its events as JSON lines (--json), the
prompt on its stdin (`-`).

The npm package brings a native program per platform (@openai/codex-linux-x64's vendor/ folder), which is
what runs: no Node.js inside the sandbox. A provider of its config (`-c model_providers.gateway...`) points
at the gateway's /v1 with `wire_api = "responses"` (OpenAI's Responses API, the only one Codex speaks) and
takes its key from AGENT_GATEWAY_KEY (`env_key`). Its own sandbox and approvals are off
(`--dangerously-bypass-approvals-and-sandbox`, meant for an agent already in a sandbox: ours has no network
and Codex's own Landlock or bubblewrap could not start inside it); its config file, update check and
analytics are not read or sent (`--ignore-user-config`, CODEX_HOME in the sandbox's own folder, TMPDIR
beside it, not above it, so that Codex puts its apply_patch helper there). Sub-agents and web search are
off: their tools are of kinds only OpenAI's own API serves. One call may wait as long as the gateway may
take over it (the provider's `stream_idle_timeout_ms`: the gateway sends the whole answer at once), and a
failed one is retried twice at most, as the gateway retried the provider already.
"""

from __future__ import annotations

import platform
from pathlib import Path

from services.coding_agents.base import Bundled, Command, Launch, npm_program

VERSION = "0.171.0"
TRIPLE = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}.get(
    platform.machine(), f"{platform.machine()}-unknown-linux-musl")
ARCH = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
PACKAGE = ("@openai", f"codex-linux-{ARCH}", "vendor", TRIPLE, "bin", "codex")  # under node_modules/


class Codex(Bundled):
    name = "codex"
    protocol = "responses"
    about = "OpenAI Codex CLI (codex exec), through the gateway's OpenAI Responses protocol"
    install = ("npm", f"@openai/codex@{VERSION}")
    calls = 30  # turns of a generation's edit
    call_tokens = 15_000  # its instructions and tools, then the growing conversation

    def program(self, installed: Path) -> Path | None:
        return npm_program(installed, *PACKAGE)

    def command(self, launch: Launch) -> Command:
        config = {"model_provider": '"gateway"', "model_providers.gateway.name": '"hyperagents gateway"',
                  "model_providers.gateway.base_url": f'"{launch.gateway_url}"',
                  "model_providers.gateway.env_key": f'"{launch.key_env}"',
                  "model_providers.gateway.wire_api": '"responses"', "approval_policy": '"never"',
                  "model_providers.gateway.request_max_retries": str(launch.retries),
                  "model_providers.gateway.stream_max_retries": str(launch.retries),
                  "model_providers.gateway.stream_idle_timeout_ms": str(int(launch.call_timeout_s * 1000)),
                  "check_for_update_on_startup": "false", "analytics.enabled": "false",
                  "features.multi_agent": "false", "web_search": '"disabled"'}
        argv = [f"{launch.installed}/node_modules/{'/'.join(PACKAGE)}", "exec", "--json", "--model", launch.model,
                "--skip-git-repo-check", "--ephemeral", "--ignore-user-config", "--color", "never",
                "--dangerously-bypass-approvals-and-sandbox", "--cd", launch.workdir]
        for key, value in config.items():
            argv += ["-c", f"{key}={value}"]
        env = {"CODEX_HOME": f"{launch.home}/codex", "TMPDIR": f"{launch.home}/tmp", "HOME": launch.home}
        return Command([*argv, "-"], env, "codex-jsonl", skip=2, folders=(f"{launch.home}/codex", f"{launch.home}/tmp"),
                       settings_flags={"reasoning_effort": "-c model_reasoning_effort="})

    def version_argv(self, launch: Launch) -> list[str]:
        return [f"{launch.installed}/node_modules/{'/'.join(PACKAGE)}", "--version"]


AGENT = Codex()
