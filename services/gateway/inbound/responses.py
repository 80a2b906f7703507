"""OpenAI's Responses API (POST /v1/responses), as Codex CLI and OpenAI's SDKs speak it, on any model of the
run: `instructions` and the input items are read into the chat form (function_call items become tool
calls, function_call_output items tool messages) and the chat answer is written back as a Response, or as
its events when `stream` is set.

The gateway keeps no responses: `store` is answered without storing, and a request that points at a kept
one (`previous_response_id`, `conversation`) or runs in the background is refused with a 400 saying to
send the whole conversation, as Codex does with `store: false`. Left out on the way, and said so here
rather than refused, since Codex sends them on its own: reasoning items of earlier turns (their
encrypted content is one provider's); `reasoning` (a Claude model that thinks in a tool loop must be sent
each earlier turn's thinking back, which those items cannot carry across providers); `include`,
`prompt_cache_key` (the gateway keys the provider's cache by session, caching.py), `metadata`,
`text.verbosity`; images and files in the input (a short note stands in, shapes.LEFT_OUT); and hosted
tools (web and file search, code interpreter, image generation, computer use, MCP servers, local shell),
which no provider but OpenAI runs and which would reach outside the sandbox. A tool of a kind not named
here is refused. A freeform tool (`custom`, Codex's apply_patch for GPT-5 models) is given to the model as
a function of one text argument, `input`, its grammar in the description; the model's call of it comes
back as a custom_tool_call of that text. `max_output_tokens` above gateway.max_output_tokens is
lowered to it.
"""

from __future__ import annotations

import json
import time

from services.config import GatewayConfig
from services.gateway.inbound.base import Event, Reply, error_reply
from services.gateway.inbound.messages import FINAL
from services.gateway.inbound.shapes import (
    LEFT_OUT,
    Tokens,
    answer_id,
    arguments,
    choice,
    invalid,
    need,
    optional,
    tool_calls,
)
from services.gateway.params import Refusal, checked

_HOSTED = frozenset(("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                     "file_search", "code_interpreter", "image_generation", "computer_use_preview", "mcp",
                     "local_shell"))
_TEXTS = ("input_text", "output_text", "text")
_KEPT = ("previous_response_id", "conversation")
_FREEFORM = {"type": "object", "required": ["input"], "properties": {"input": {
    "type": "string", "description": "The tool's input, as text in the form its description gives."}}}


def _text(content: object, where: str) -> str:
    """A message's content (a string, or text parts; media parts become a note) as one text."""
    if isinstance(content, str):
        return content
    pieces = []
    for i, part in enumerate(need(content, list, where)):
        kind = need(part, dict, f"{where}[{i}]").get("type")
        if kind in _TEXTS:
            pieces.append(need(part.get("text"), str, f"{where}[{i}].text"))
        elif kind == "refusal":
            pieces.append(need(part.get("refusal"), str, f"{where}[{i}].refusal"))
        elif kind in ("input_image", "input_file", "input_audio"):
            pieces.append(LEFT_OUT.format(kind=kind.removeprefix("input_")))
        else:
            raise invalid(f"{where}[{i}].type", "must be input_text, output_text, refusal, input_image or input_file")
    return "\n".join(pieces)


def _call(messages: list, call_id: str, name: str, arguments: str) -> None:
    """Add a tool call to the assistant's turn it belongs to: the last message when it is the assistant's
    (its text, or calls made at once), else a turn of its own."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last["tool_calls"] = [*last.get("tool_calls", ()), call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _item(messages: list, item: dict, where: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise invalid(f"{where}.role", "must be 'user', 'assistant', 'system' or 'developer'")
        messages.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
    elif kind in ("function_call", "custom_tool_call"):
        custom = kind == "custom_tool_call"
        field = "input" if custom else "arguments"
        given = need(item.get(field), str, f"{where}.{field}")
        _call(messages, need(item.get("call_id"), str, f"{where}.call_id"),
              need(item.get("name"), str, f"{where}.name"), json.dumps({"input": given}) if custom else given)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        messages.append({"role": "tool", "tool_call_id": need(item.get("call_id"), str, f"{where}.call_id"),
                         "content": _text(item.get("output"), f"{where}.output")})
    elif kind != "reasoning":
        raise invalid(f"{where}.type", "must be message, function_call, function_call_output or reasoning "
                      "(items kept by OpenAI are not kept here)")


def _messages(body: dict) -> list:
    messages: list = []
    instructions = optional(body, "instructions", str)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        return [*messages, {"role": "user", "content": given}]
    for i, item in enumerate(need(given, list, "input")):
        _item(messages, need(item, dict, f"input[{i}]"), f"input[{i}]")
    return messages


def _function(tool: dict, where: str) -> dict:
    """A function tool, or a freeform one as a function of its text `input`, in the chat form."""
    name = need(tool.get("name"), str, f"{where}.name")
    description = optional(tool, "description", str, f"{where}.")
    if tool.get("type") == "custom":
        shape = optional(tool, "format", dict, f"{where}.") or {}
        grammar = optional(shape, "definition", str, f"{where}.format.")
        if grammar:
            syntax = optional(shape, "syntax", str, f"{where}.format.") or "given"
            description = f"{description or ''}\n\nThe input follows this {syntax} grammar:\n{grammar}"
        return {"name": name, "parameters": _FREEFORM, **({"description": description} if description else {})}
    function = {"name": name, "parameters": optional(tool, "parameters", dict, f"{where}.")
                or {"type": "object", "properties": {}}}
    if description is not None:
        function["description"] = description
    if tool.get("strict") is not None:
        function["strict"] = need(tool["strict"], bool, f"{where}.strict")
    return function


def _tools(body: dict, params: dict) -> None:
    """Function and freeform tools (hosted ones left out, see the module's docstring) and `tool_choice`."""
    tools = []
    for i, tool in enumerate(optional(body, "tools", list) or ()):
        where = f"tools[{i}]"
        kind = need(tool, dict, where).get("type")
        if kind in _HOSTED:
            continue
        if kind not in ("function", "custom"):
            raise invalid(f"{where}.type", "must be 'function' or 'custom' (hosted tools are left out; others are "
                          "unknown)")
        tools.append({"type": "function", "function": _function(tool, where)})
    chosen = body.get("tool_choice")
    if tools:
        params["tools"] = tools
        if isinstance(chosen, dict) and chosen.get("type") in ("function", "custom"):
            params["tool_choice"] = {"type": "function", "function": {"name": need(chosen.get("name"), str,
                                                                                  "tool_choice.name")}}
        elif chosen in ("auto", "none", "required"):
            params["tool_choice"] = chosen
        elif chosen is not None:
            raise invalid("tool_choice", "must be 'auto', 'none', 'required' or a function of the request's tools")


def _settings(body: dict, params: dict, gw: GatewayConfig) -> None:
    """Sampling, the output cap and the output's format, in the chat form's names."""
    most = optional(body, "max_output_tokens", int)
    if most is not None:
        if most < 1:
            raise invalid("max_output_tokens", "must be at least 1")
        params["max_tokens"] = min(most, gw.max_output_tokens)
    for key in ("temperature", "top_p", "parallel_tool_calls", "user"):
        if body.get(key) is not None:
            params[key] = body[key]
    shape = (optional(body, "text", dict) or {}).get("format")
    if isinstance(shape, dict) and shape.get("type") == "json_schema":
        params["response_format"] = {"type": "json_schema", "json_schema": {
            k: shape[k] for k in ("name", "description", "schema", "strict") if shape.get(k) is not None}}
    elif isinstance(shape, dict) and shape.get("type") == "json_object":
        params["response_format"] = {"type": "json_object"}


def to_chat(body: dict, gw: GatewayConfig) -> tuple[list, dict]:
    """A Responses request as the chat form's messages and checked parameters."""
    kept = next((key for key in _KEPT if body.get(key) is not None), None)
    if kept or body.get("background") is True:
        why = f"{kept} is" if kept else "background responses are"
        raise Refusal(400, f"{why} not supported: the gateway keeps no responses; send the whole conversation "
                      "as input (store: false)")
    params: dict = {"model": body.get("model")}
    _settings(body, params, gw)
    _tools(body, params)
    return checked({**params, "messages": _messages(body)}, gw)


def _freeform(body: dict) -> set[str]:
    """The names of the request's freeform tools (an admitted request's tools are objects)."""
    return {str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "custom"}


def _call_item(i: int, call: tuple[str, str, str], payload: dict, freeform: set[str]) -> dict:
    """A tool call of the answer as a function_call item, or a custom_tool_call of a freeform tool's text."""
    call_id, name, args = call
    item = {"id": answer_id(f"fc_{i}_", payload), "status": "completed",
            "call_id": call_id or answer_id(f"call_{i}_", payload), "name": name}
    if name not in freeform:
        return {"type": "function_call", **item, "arguments": args}
    text = arguments(args).get("input")
    return {"type": "custom_tool_call", **item, "input": text if isinstance(text, str) else args}


def response(payload: dict, body: dict) -> dict:
    """A chat answer as a Response: a message item with its text, an item per tool call, its status
    (incomplete when the output cap cut it) and its tokens."""
    said, finish = choice(payload)
    output: list = []
    if isinstance(said.get("content"), str) and said["content"]:
        output.append({"type": "message", "id": answer_id("msg_", payload), "status": "completed", "role":
                       "assistant", "content": [{"type": "output_text", "text": said["content"], "annotations": []}]})
    freeform = _freeform(body)
    output += [_call_item(i, call, payload, freeform) for i, call in enumerate(tool_calls(said))]
    used, cut = Tokens.of(payload), finish == "length"
    created = payload.get("created")
    return {"id": answer_id("resp_", payload), "object": "response",
            "created_at": created if isinstance(created, int) else int(time.time()),
            "status": "incomplete" if cut else "completed", "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "model": body["model"],
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "store": False,
            "usage": {"input_tokens": used.prompt, "input_tokens_details": {"cached_tokens": used.cache_read},
                      "output_tokens": used.output, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": used.prompt + used.output}}


def _item_events(i: int, item: dict) -> list[tuple[str, dict]]:
    """One output item's events, from its adding to its end."""
    where = {"item_id": item["id"], "output_index": i}
    if item["type"] == "message":
        part = item["content"][0]
        opened, spoken = {"type": "output_text", "text": "", "annotations": []}, {**where, "content_index": 0}
        middle = [("response.content_part.added", {**spoken, "part": opened}),
                  ("response.output_text.delta", {**spoken, "delta": part["text"]}),
                  ("response.output_text.done", {**spoken, "text": part["text"]}),
                  ("response.content_part.done", {**spoken, "part": part})]
        started = {**item, "status": "in_progress", "content": []}
    else:
        field = "arguments" if item["type"] == "function_call" else "input"
        named = "function_call_arguments" if field == "arguments" else "custom_tool_call_input"
        middle = [(f"response.{named}.delta", {**where, "delta": item[field]}),
                  (f"response.{named}.done", {**where, field: item[field]})]
        started = {**item, "status": "in_progress", field: ""}
    return [("response.output_item.added", {"output_index": i, "item": started}), *middle,
            ("response.output_item.done", {"output_index": i, "item": item})]


def response_events(answer: dict) -> list[Event]:
    """A Response as the events a streamed one comes in, each with its sequence number."""
    begun = {**answer, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    steps = [("response.created", {"response": begun}), ("response.in_progress", {"response": begun})]
    for i, item in enumerate(answer["output"]):
        steps += _item_events(i, item)
    steps.append((f"response.{answer['status']}", {"response": answer}))
    return [(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(steps)]


def openai_error(status: int, message: str, kind: str) -> Reply:
    reply = error_reply(status, message, kind)
    if kind in FINAL:
        reply.headers["x-should-retry"] = "false"
    return reply


class Responses:
    name = "responses"
    paths = ("/v1/responses", "/responses")
    counts = False
    request = staticmethod(to_chat)
    reply = staticmethod(response)
    events = staticmethod(response_events)
    error = staticmethod(openai_error)

    @staticmethod
    def model(body: dict) -> str:
        requested = body.get("model")
        if not isinstance(requested, str) or not isinstance(body.get("input"), str | list):
            raise Refusal(400, "a Responses request needs a model string and an input (a string or a list of items)")
        return requested

    @staticmethod
    def streams(body: dict) -> bool:
        return body.get("stream") is True
