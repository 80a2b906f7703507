"""Claude Code (npm @anthropic-ai/claude-code) as the meta agent: headless (`-p`, the prompt on its stdin), its
events as stream-json.

The npm package installs a native program per platform (@anthropic-ai/claude-code-linux-x64, ...), which
is what runs: no Node.js inside the sandbox. It speaks Anthropic's Messages API to ANTHROPIC_BASE_URL (the
gateway, without /v1: it adds /v1/messages itself) with ANTHROPIC_API_KEY (the session key). Every model
alias it has (ANTHROPIC_MODEL, the small fast one for background calls, sub-agents') is the run's meta
model, the only one the key may call. One call may take as long as the gateway may take over it
(API_TIMEOUT_MS) and is retried twice at most (CLAUDE_CODE_MAX_RETRIES): the gateway retried the provider
already, and a refusal it marks final (`x-should-retry: false`: no calls or budget left) is not retried at
all. Permissions are bypassed (`--dangerously-skip-permissions`, meant for sandboxes without internet): ours
is the boundary, and a headless run has nobody to ask. Telemetry, error reports, update checks, feedback
surveys and other traffic are switched off by its variables (and there is no network anyway).
"""

from __future__ import annotations

import platform
from pathlib import Path

from services.coding_agents.base import Bundled, Command, Launch, npm_program

VERSION = "2.1.332"
ARCH = {"x86_64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
PACKAGE = ("@anthropic-ai", f"claude-code-linux-{ARCH}", "claude")  # the native program under node_modules/
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
         "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
         "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1"}


class ClaudeCode(Bundled):
    name = "claude-code"
    protocol = "messages"
    about = "Claude Code, headless (claude -p), through the gateway's Anthropic Messages protocol"
    install = ("npm", f"@anthropic-ai/claude-code@{VERSION}")
    calls = 30  # turns of a generation's edit; each resends the conversation so far
    call_tokens = 20_000  # its system prompt and tool definitions alone are ~12k tokens

    def program(self, installed: Path) -> Path | None:
        return npm_program(installed, *PACKAGE)

    def command(self, launch: Launch) -> Command:
        argv = [f"{launch.installed}/node_modules/{'/'.join(PACKAGE)}", "-p", "--output-format",
                "stream-json", "--verbose", "--model", launch.model, "--dangerously-skip-permissions",
                "--no-session-persistence", "--strict-mcp-config"]
        aliases = ("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                   "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")
        env = {"ANTHROPIC_BASE_URL": launch.gateway_url.removesuffix("/v1"), "ANTHROPIC_API_KEY": launch.key,
               "CLAUDE_CONFIG_DIR": f"{launch.home}/claude", "HOME": launch.home, **QUIET,
               "ANTHROPIC_MODEL": launch.model, **dict.fromkeys(aliases, launch.model),
               "API_TIMEOUT_MS": str(int(launch.call_timeout_s * 1000)), "CLAUDE_CODE_MAX_RETRIES": str(launch.retries)}
        return Command(argv, env, "claude-stream-json", settings_flags={"max_turns": "--max-turns", "tools": "--tools"},
                       folders=(f"{launch.home}/claude",))

    def version_argv(self, launch: Launch) -> list[str]:
        return [f"{launch.installed}/node_modules/{'/'.join(PACKAGE)}", "--version"]


AGENT = ClaudeCode()
