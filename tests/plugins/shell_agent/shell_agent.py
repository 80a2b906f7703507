"""Three meta agent plug-ins: `shell-agent` runs /bin/sh, which makes the scripted improving edit
(tests/support/scripted_loop.py's MARKER), keeps the prompt it was given and prints one event in Codex's
JSON-lines shape; `missing-agent` is not installed; `broken-agent` lacks what an agent has."""

from pathlib import Path

from services.coding_agents.base import PROMPT, Command

# $1 $2: the settings' flag and value the launcher put in (--turns 3), $3: the prompt.
SCRIPT = """printf '%s' "$3" > /tmp/prompt.txt
sed -i 's/You are an expert grader/GRADE-CAREFULLY-7 You are an expert grader/' task_agent/task_agent.py
printf '%s\\n' '{"type":"item.completed","item":{"type":"command_execution","command":"sed -i task_agent.py",\
"aggregated_output":"","exit_code":0}}'
said="$(head -c 200 /tmp/prompt.txt | tr -d '\\n\\"')"
printf '{"type":"item.completed","item":{"type":"agent_message","text":"turns %s; prompt %s"}}\\n' "$2" "$said"
"""


class ShellAgent:
    name = "shell-agent"
    protocol = "chat"
    about = "a shell script that makes one edit"
    install = ("pip", "shell-agent==0.1")
    calls = 1
    call_tokens = 100
    prompt = "Improve the agent in {repo}. Try it with {try_command}."
    settings = {"max_turns": 3}

    def program(self, installed: Path) -> Path | None:
        return Path("/bin/sh")

    def command(self, launch) -> Command:
        return Command(["/bin/sh", "-c", SCRIPT, "shell-agent", PROMPT], {"SHELL_AGENT": "1"}, "codex-jsonl",
                       settings_flags={"max_turns": "--turns"}, skip=4)

    def version_argv(self, launch) -> list[str]:
        return ["/bin/sh", "-c", "echo shell-agent 0.1"]


class MissingAgent(ShellAgent):
    name = "missing-agent"

    def program(self, installed: Path) -> Path | None:
        return None


class BrokenAgent:
    name = "broken-agent"
