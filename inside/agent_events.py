"""A coding agent's events, read into the meta transcript's markdown (the `## role` turns that
agent/tool_loop.py writes and the dashboard reads), inside the sandbox.

Each agent has its own stream: Claude Code's stream-json lines, Codex's JSON lines, mini-swe-agent's
trajectory file. A model turn becomes `## assistant`, one turn per tool call (`Tool call: NAME ...`), its
result a `## tool` turn (`Error: ...` or `[exit status N]` when it failed), a failed call or run `## error`,
and usage `## usage`. The agent wrote all of it: each piece is cut to MAX_PIECE and nothing in it is run.
Standard library only.
"""

import json

MAX_PIECE = 32 * 1024  # characters kept of one message, command or result


def cut(value, limit: int = MAX_PIECE) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} characters cut]"


def turn(role: str, text) -> str:
    return f"## {role}\n\n{cut(text)}\n\n"


def call(name, arguments) -> str:
    return turn("assistant", f"Tool call: {cut(str(name), 64).replace(chr(10), ' ') or 'unnamed'} {cut(arguments)}")


def _result_text(content) -> str:
    if isinstance(content, list):  # content blocks
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return content if isinstance(content, str) else cut(content)


def claude(event: dict) -> str:
    """One stream-json line of Claude Code (`claude -p --output-format stream-json --verbose`)."""
    kind, message = event.get("type"), event.get("message")
    blocks = message.get("content") if isinstance(message, dict) else None
    blocks = blocks if isinstance(blocks, list) else []
    if kind == "system" and event.get("subtype") == "init":
        return turn("system", f"claude-code {event.get('claude_code_version', '')}, model {event.get('model', '')}, "
                              f"tools {cut(event.get('tools'), 2000)}")
    if kind == "system" and event.get("subtype") == "api_retry":  # a model call that failed, tried again
        return turn("error", f"model call failed ({event.get('error_status')} {event.get('error')}); "
                             f"attempt {event.get('attempt')} of {event.get('max_retries')}")
    if kind == "assistant":
        parts = []
        for block in (b for b in blocks if isinstance(b, dict)):
            if block.get("type") == "text":
                parts.append(turn("assistant", str(block.get("text", ""))))
            elif block.get("type") == "tool_use":
                parts.append(call(block.get("name"), block.get("input")))
        return "".join(parts)
    if kind == "user":
        parts = []
        for block in (b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"):
            text = _result_text(block.get("content"))
            parts.append(turn("tool", f"Error: {text}" if block.get("is_error") is True else text))
        return "".join(parts)
    if kind == "result":
        if event.get("is_error") is True or event.get("subtype") != "success":
            return turn("error", f"{event.get('subtype')}: {event.get('result', '')}")
        return turn("usage", f"{event.get('num_turns')} turns; usage {cut(event.get('usage'), 2000)}")
    return ""


def codex(event: dict) -> str:
    """One line of `codex exec --json`."""
    kind, item = event.get("type"), event.get("item")
    if kind in ("turn.failed", "error"):
        error = event.get("error")
        return turn("error", error.get("message", error) if isinstance(error, dict) else event.get("message", ""))
    if kind == "turn.completed":
        return turn("usage", f"usage {cut(event.get('usage'), 2000)}")
    if kind != "item.completed" or not isinstance(item, dict):
        return ""
    what = item.get("type")
    if what == "agent_message":
        return turn("assistant", str(item.get("text", "")))
    if what == "reasoning":
        return turn("assistant", f"[reasoning] {item.get('text', '')}")
    if what == "command_execution":
        code = item.get("exit_code")
        status = f"\n[exit status {code}]" if isinstance(code, int) else f"\n[{item.get('status')}]"
        return call("shell", item.get("command")) + turn("tool", f"{_result_text(item.get('aggregated_output'))}"
                                                               f"{status}")
    if what == "file_change":
        changes = item.get("changes")
        done = item.get("status") == "completed"
        return call("apply_patch", changes) + turn("tool", "patch applied" if done else f"Error: patch "
                                                                                       f"{item.get('status')}")
    if what == "error":
        return turn("error", str(item.get("message", "")))
    return call(what, {k: v for k, v in item.items() if k not in ("id", "type")}) + turn("tool", item.get("status"))


def mini(trajectory: dict) -> str:
    """mini-swe-agent's whole trajectory file (its --output)."""
    parts = []
    messages = trajectory.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role, content = str(message.get("role", "")), _result_text(message.get("content") or "")
        calls = message.get("tool_calls")
        if role == "assistant" and isinstance(calls, list) and calls:
            parts += [turn("assistant", content)] if content.strip() else []
            for c in calls:
                f = c.get("function") if isinstance(c, dict) else None
                parts.append(call(f.get("name"), f.get("arguments")) if isinstance(f, dict) else call("?", c))
        elif role == "tool":
            parts.append(turn("tool", content + _exit_status(content)))
        elif role in ("system", "user", "assistant"):
            parts.append(turn(role, content))
    info = trajectory.get("info")
    status = info.get("exit_status") if isinstance(info, dict) else None
    if status not in (None, "Submitted"):
        parts.append(turn("error", f"mini-swe-agent ended: {status}"))
    return "".join(parts)


def _exit_status(observation: str) -> str:
    """mini-swe-agent's observation is JSON with its command's returncode: said as the tool loop says it."""
    try:
        code = json.loads(observation).get("returncode")
    except (ValueError, AttributeError, RecursionError):
        return ""
    return f"\n[exit status {code}]" if isinstance(code, int) else ""


LINES = {"claude-stream-json": claude, "codex-jsonl": codex}  # formats read a line at a time
TURN_LIMIT = {"claude-stream-json": '"subtype":"error_max_turns"'}  # the line that says the turns ran out


def turns_ran_out(events: str, text: str) -> bool:
    """Whether a line of events says the agent stopped at its turn limit: a run that ends so ended well, as the
    built-in meta agent's does when it reaches its call cap (its change is evaluated)."""
    marker = TURN_LIMIT.get(events)
    if marker is None or marker not in text.replace(" ", ""):
        return False
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(event, dict) and event.get("type") == "result" and event.get("subtype") == "error_max_turns"


def line(events: str, text: str) -> str:
    """The transcript of one line of an agent's stdout in format `events` (a line that is no JSON object
    is shown as it is)."""
    reader = LINES.get(events)
    if reader is None:
        return text
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return turn("system", text) if text.strip() else ""
    return reader(event) if isinstance(event, dict) else ""
