"""The tool loop of the reference's `chat_with_agent` (agent/llm_withtools.py): tools used through text.

Reproduced, item by item:
- Every user message (the first and each one carrying tool results) begins with the same preamble:
  the tools' descriptions (each `tool_info()` dict as Python prints it, in a fenced block) and the
  one-tool-per-reply `<json>{"tool_name": ..., "tool_input": ...}</json>` format, then a blank line.
  With no tools the preamble is empty, so the message begins with the blank line alone.
- A tool use is a `<json>` block holding one `{...}` object (regex `<json>\\s*(\\{.*?\\})\\s*</json>`);
  blocks that do not parse, or lack `tool_name` or `tool_input`, are skipped. Only the first tool use
  of a reply runs; its result goes back as the reference's tool message (see `tool_message`).
- A reply with no tool use, at least 2000 characters long, in which "<json>", "tool_name" and
  "tool_input" first appear in that order, looks like a tool use cut off by the output limit: the
  model is told so and asked again. Such retries do not count as tool calls.
- At most MAX_TOOL_CALLS tools run (0 or less: no limit); a reply asking for one more ends the loop.
- A failing tool gives "Error: ..." text; an error of the loop itself is logged and raised.
The loop returns the whole message history; its last message is the model's last reply.
"""

import json
import re

from agent.llm import get_response_from_llm
from agent.tools import load_tools

MAX_TOOL_CALLS = 40
CUT_OFF_LENGTH = 2000  # replies shorter than this are taken as finished, not cut off
RETRY_TEXT = "Error: your reply was cut off by the output length limit. Please send it again."
_TOOL_USE = re.compile(r"<json>\s*(\{.*?\})\s*</json>", re.DOTALL)


def tooluse_prompt(tool_infos):
    """The text that tells the model which tools it has and how to call one; empty without tools."""
    if not tool_infos:
        return ""
    listed = "\n\n".join(str(info) for info in tool_infos)
    return (
        "These are the tools you can use:\n"
        f"```\n{listed}\n```\n\n"
        "When you need a tool, call exactly one, written like this:\n"
        "<json>\n{\n    \"tool_name\": ...,\n    \"tool_input\": ...\n}\n</json>\n\n"
        "NEVER CALL MORE THAN ONE TOOL IN A REPLY, AND KEEP TO THE TOOL_NAME / TOOL_INPUT FORMAT SHOWN ABOVE.\n"
        "DO NOT INVENT OR PRETEND ANYTHING."
    )


def find_tool_uses(reply):
    """The tool uses written in `reply`, in order; None when there is none."""
    uses = []
    for block in _TOOL_USE.findall(reply):
        try:
            use = json.loads(block)
        except json.JSONDecodeError:
            continue
        if "tool_name" in use and "tool_input" in use:
            uses.append(use)
    return uses or None


def looks_cut_off(reply, tool_uses):
    """Whether `reply` reads as a tool use that the output limit cut short."""
    if tool_uses:
        return False
    marks = [reply.find(mark) for mark in ("<json>", "tool_name", "tool_input")]
    return -1 not in marks and marks[0] < marks[1] < marks[2] and len(reply) >= CUT_OFF_LENGTH


def run_tool(tools, name, tool_input):
    """The tool's output, or "Error: ..." when there is no such tool or it fails."""
    try:
        if name not in tools:
            return f"Error: there is no tool named '{name}'"
        return tools[name]["function"](**tool_input)
    except Exception as e:
        return f"Error: the tool '{name}' failed: {e}"


def tool_message(name, tool_input, output):
    """A tool's result in the reference's shape: a `<json>` block that repeats the call and adds the
    output, the input as Python prints a dict and the output between quotes, neither escaped."""
    return "\n".join([
        "<json>",
        "    {",
        f'        "tool_name": "{name}",',
        f'        "tool_input": {tool_input},',
        f'        "tool_output": "{output}"',
        "    }",
        "    </json>",
    ])


def chat_with_agent(msg, model, msg_history=None, logging=print, tools_available=(), max_tool_calls=MAX_TOOL_CALLS):
    """Talk with `model` from `msg` on, running the tools it asks for; returns the message history.

    `tools_available`: "all", or the names of the tools to offer (none by default).
    """
    history = list(msg_history or [])
    try:
        tools = {tool["info"]["name"]: tool for tool in load_tools(names=tools_available, logging=logging)}
        preamble = tooluse_prompt([tool["info"] for tool in tools.values()]) + "\n\n"
        logging(f"Input: {msg!r}")
        reply, history = get_response_from_llm(preamble + msg, model=model, msg_history=history)
        logging(f"Output: {reply!r}")
        uses = find_tool_uses(reply)
        retry = looks_cut_off(reply, uses)
        calls = 0
        while uses or retry:
            if max_tool_calls > 0 and calls >= max_tool_calls:
                logging("Error: the limit of tool calls is reached; stopping.")
                break
            parts = []
            if uses:
                name, tool_input = uses[0]["tool_name"], uses[0]["tool_input"]
                parts.append(tool_message(name, tool_input, run_tool(tools, name, tool_input)))
                calls += 1
                logging(f"Tool output: {parts[-1]!r}")
            if retry:
                logging(RETRY_TEXT)
                parts.append(RETRY_TEXT)
            reply, history = get_response_from_llm(preamble + "\n\n".join(parts), model=model, msg_history=history)
            logging(f"Output: {reply!r}")
            uses = find_tool_uses(reply)
            retry = looks_cut_off(reply, uses)
    except Exception as e:
        logging(f"Error: {e}")
        raise
    return history
