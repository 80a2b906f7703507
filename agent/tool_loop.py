"""The tool loop: the model asks for one tool call per reply, the call runs, its result goes back.

By default tool calls travel as text, `<json>{"tool_name": ..., "tool_input": ...}</json>`, which
every chat model can produce; `native=True` uses the provider's function calling instead. The loop
ends when a reply asks for no tool, after `max_tool_calls` calls, or when the model call fails
(e.g. the gateway refuses it because the run's budget is spent): whatever the tools changed so far
is the outcome, so failing loudly would only lose it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from agent.extract import extract_jsons
from agent.llm import Usage, get_response

_JSON_BLOCK = re.compile(r"<json>\s*(.*?)\s*</json>", re.S | re.I)


def _protocol(tools: list, max_tool_calls: int) -> str:
    first = tools[0].TOOL
    example = {"tool_name": first["name"],
               "tool_input": {k: f"<{k}>" for k in first["input_schema"].get("required", [])}}
    specs = "\n\n".join(
        f"### {t.TOOL['name']}\n{t.TOOL['description']}\nInput schema: {json.dumps(t.TOOL['input_schema'])}"
        for t in tools
    )
    return f"""You can use tools. To call one, end your reply with exactly one tool call in this form:
<json>
{json.dumps(example)}
</json>
The content of the tags must be one valid JSON object with "tool_name" (a tool below) and "tool_input" \
(an object matching that tool's input schema); escape newlines in strings as \\n and quotes as \\". \
Make at most one tool call per reply. The next message starts with "Tool result:" and shows what the \
call returned. You can make at most {max_tool_calls} tool calls in total. When you are done, reply \
without a tool call: that reply ends the conversation.

## Tools

{specs}"""


def _call_schema(tools: list) -> dict:
    """A tool call, or {"done": ...} to finish: the reply's shape for models that need it enforced."""
    calls = [{"type": "object", "required": ["tool_name", "tool_input"],
              "properties": {"tool_name": {"type": "string", "enum": [t.TOOL["name"]]},
                             "tool_input": t.TOOL["input_schema"]}} for t in tools]
    done = {"type": "object", "required": ["done"], "properties": {"done": {"type": "string"}}}
    return {"anyOf": [*calls, done]}


def _native_note(max_tool_calls: int) -> str:
    return (f"Call one tool at a time. You can make at most {max_tool_calls} tool calls in total. "
            "When you are done, reply without a tool call: that reply ends the conversation.")


def _with_instructions(messages: list[dict], instructions: str) -> list[dict]:
    """`messages` with the tool instructions in the system message (added if there is none)."""
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{instructions}"}, *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]


def _json_call(text: str) -> tuple[str | None, object, str | None] | None:
    """(tool name, input, problem) of the reply's tool call; None when it asks for no tool."""
    calls = [o for o in extract_jsons(text) if "tool_name" in o]
    if not calls:
        # Models often write file contents with raw newlines inside JSON strings; accept those.
        for block in _JSON_BLOCK.findall(text):
            try:
                obj = json.loads(block, strict=False)
            except ValueError:
                continue
            if isinstance(obj, dict) and "tool_name" in obj:
                calls.append(obj)
    if not calls:
        if "<json>" in text.lower() or '"tool_name"' in text:
            return None, None, ("the tool call could not be read: the <json> tags must hold one valid JSON "
                                'object with "tool_name" and "tool_input". Nothing was run.')
        return None
    problem = None
    if len(calls) > 1:
        problem = f"only the first of the reply's {len(calls)} tool calls was run."
    return calls[0]["tool_name"], calls[0].get("tool_input", {}), problem


def _native_call(reply) -> tuple[str | None, object, str | None] | None:
    if not reply.tool_calls:
        return None
    function = reply.tool_calls[0].get("function") or {}
    try:
        tool_input = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return None, None, "the tool call's arguments are not valid JSON. Nothing was run."
    problem = None
    if len(reply.tool_calls) > 1:
        problem = f"only the first of the reply's {len(reply.tool_calls)} tool calls was run."
    return function.get("name"), tool_input, problem


def _run_tool(by_name: dict, name: str, tool_input: object) -> str:
    if name not in by_name:
        return f"Error: there is no tool {name!r}; the tools are {', '.join(by_name)}."
    if not isinstance(tool_input, dict):
        return "Error: `tool_input` must be a JSON object."
    try:
        return by_name[name].run(tool_input)
    except Exception as e:  # tools should not raise, but an edited one might
        return f"Error: {type(e).__name__}: {e}"


def log_message(log: Callable[[str], None], message: dict) -> None:
    """`message` as its transcript entry: `## <role>`, its text, and each native tool call it makes."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        text += f"\n\nTool call: {call['function']['name']} {call['function']['arguments']}"
    log(f"## {message['role']}\n\n{text}")


def chat_with_tools(
    messages: list[dict],
    model: str,
    tools: list,
    max_tool_calls: int = 40,
    log: Callable[[str], None] | None = None,
    temperature: float | None = 0.0,
    native: bool = False,
) -> tuple[list[dict], Usage]:
    """Run the conversation until the model stops calling tools; returns all messages and the usage.

    `tools` are modules (or objects) with `TOOL` and `run`, see agent/tools/. `log` receives every
    message as markdown as soon as it exists, so a transcript survives a killed run.
    """
    log = log or (lambda text: None)
    by_name = {t.TOOL["name"]: t for t in tools}
    params = {}
    if native:
        params["tools"] = [{"type": "function", "function": {
            "name": t.TOOL["name"], "description": t.TOOL["description"], "parameters": t.TOOL["input_schema"],
        }} for t in tools]
        messages = _with_instructions(messages, _native_note(max_tool_calls))
    else:
        messages = _with_instructions(messages, _protocol(tools, max_tool_calls))
        params["schema"] = _call_schema(tools)
    for message in messages:
        log_message(log, message)

    def add(message: dict) -> None:
        messages.append(message)
        log_message(log, message)

    usage, calls = Usage(), 0
    while True:
        try:
            reply = get_response(messages, model, temperature=temperature, **params)
        except Exception as e:
            status = getattr(e, "status_code", None)  # 402: budget spent, 429: call limit, at the gateway
            http = f" (HTTP {status})" if status else ""
            log(f"## error\n\nThe model call failed{http}, so the tool loop stops: {type(e).__name__}: {e}")
            return messages, usage
        usage.add(reply.usage)
        call = _native_call(reply) if native else _json_call(reply.text)
        if call is None:
            add({"role": "assistant", "content": reply.text})
            return messages, usage

        name, tool_input, problem = call
        if native:
            # Only the call that runs is kept, so every tool call in the history has its result.
            first = reply.tool_calls[0]
            add({"role": "assistant", "content": reply.text or None, "tool_calls": [{
                "id": first["id"], "type": "function",
                "function": {"name": first["function"]["name"], "arguments": first["function"]["arguments"]},
            }]})
        else:
            add({"role": "assistant", "content": reply.text})

        if calls >= max_tool_calls:
            result = "Not run."
        elif name is None:  # a tool call was meant but could not be read; it counts, so a model stuck on it stops
            result = f"Error: {problem}"
            calls += 1
        else:
            result = _run_tool(by_name, name, tool_input)
            calls += 1
            if problem:
                result += f"\n\nNote: {problem}"
        limit_reached = calls >= max_tool_calls
        if limit_reached:
            result += (f"\n\nThe limit of {max_tool_calls} tool calls is reached: no further tool call "
                       "will run, and the conversation ends here.")
        if native:
            add({"role": "tool", "tool_call_id": reply.tool_calls[0]["id"], "content": result})
        else:
            add({"role": "user", "content": f"Tool result:\n{result}"})
        if limit_reached:
            return messages, usage
