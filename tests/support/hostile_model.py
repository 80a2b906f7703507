"""A meta model that tries attacks: scripted bash commands, for the security tests' runs."""

import json


def tool_call(command: str) -> str:
    """A meta-model reply asking for one bash command."""
    return "An attack.\n<json>" + json.dumps({"tool_name": "bash", "tool_input": {"command": command}}) + "</json>"


def responder(commands: list[str]):
    """The meta model runs `commands` in bash, one a turn, then stops; the task model answers "incorrect"."""
    def respond(request: dict) -> str:
        messages = request["messages"]
        opening = " ".join(str(m["content"]) for m in messages[:2])
        if "/workspace" in opening and "/feedback" in opening:
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if turn < len(commands):
                return tool_call(commands[turn])
            return "Done."
        return '<json>{"response": "incorrect"}</json>'

    return respond
