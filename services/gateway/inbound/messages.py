"""Anthropic's Messages API (POST /v1/messages), as Claude Code and Anthropic's SDKs speak it, on any model
of the run: a request is read into the chat form (tool_use blocks become tool calls, tool_result blocks
tool messages) and the chat answer is written back as a Message, or as its events when `stream` is set.

What a request may hold is read field by field; fields this file does not read never reach a provider.
Left out on the way, and said so here rather than refused, since Claude Code sends them on its own:
`metadata`, `thinking`, `top_k` and other sampling or beta fields (each provider has its own); thinking
blocks of earlier turns; images and documents (a short note stands in, see shapes.LEFT_OUT); tools of
Anthropic's own kinds (web search, its versioned bash and editor: no provider of the run but Anthropic
knows them, and a sandboxed agent has no use for a search that reaches out); `cache_control` on anything
but a text block (the gateway marks conversations itself, caching.py). `max_tokens` above
gateway.max_output_tokens is lowered to it: a coding agent sets it from the model it believes it talks to.
Claude Code also asks POST /v1/messages/count_tokens for its context gauge: `CountTokens` answers with
the gateway's estimate (a token per 4 bytes of the request), with no provider call.
"""

from __future__ import annotations

import json

from services.config import GatewayConfig
from services.gateway.inbound.base import Event, Reply, asks_to_stream, requested_model, retry_headers
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
from services.gateway.params import check_cache_control, checked

_STOPS = {"length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use", "content_filter": "refusal"}
_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error",
           404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
_MEDIA = ("image", "document")


def _text(block: dict, where: str) -> dict:
    """A text block as a chat text part, its cache mark kept (params.py checks it)."""
    part: dict = {"type": "text", "text": need(block.get("text"), str, f"{where}.text")}
    if block.get("cache_control") is not None:  # its type and lifetime: what a provider's cache reads
        mark = need(block["cache_control"], dict, f"{where}.cache_control")
        part["cache_control"] = {k: mark[k] for k in ("type", "ttl") if k in mark}
        check_cache_control(f"{where}.cache_control", part["cache_control"])
    return part


def _system(value: object, where: str = "system") -> list:
    """`system`, or a system message of the conversation (what Claude Code says mid-way, such as its
    environment), a string or text blocks, as a system message (none when empty)."""
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    blocks = need(value, list, where)
    parts = [_text(need(b, dict, f"{where}[{i}]"), f"{where}[{i}]") for i, b in enumerate(blocks)]
    return [{"role": "system", "content": parts}] if parts else []


def _result_text(block: dict, where: str) -> str:
    """A tool_result's content (a string, or text and media blocks) as one text."""
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        pieces = []
        for i, part in enumerate(need(content, list, f"{where}.content")):
            part = need(part, dict, f"{where}.content[{i}]")
            kind = part.get("type")
            pieces.append(LEFT_OUT.format(kind=kind) if kind in _MEDIA
                          else need(part.get("text"), str, f"{where}.content[{i}].text"))
        text = "\n".join(pieces)
    return f"Error: {text}" if block.get("is_error") is True else text


def _turn(role: str, blocks: list, where: str) -> list:
    """One message's blocks as chat messages: an assistant's text and tool calls, or a user's tool results
    (each its own tool message, first, as the chat form wants them after the calls) and text."""
    parts, calls, results = [], [], []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        kind = need(block, dict, at).get("type")
        if kind == "text":
            parts.append(_text(block, at))
        elif kind in _MEDIA:
            parts.append({"type": "text", "text": LEFT_OUT.format(kind=kind)})
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": need(block.get("id"), str, f"{at}.id"), "type": "function", "function": {
                "name": need(block.get("name"), str, f"{at}.name"),
                "arguments": json.dumps(need(block.get("input", {}), dict, f"{at}.input"))}})
        elif kind == "tool_result" and role == "user":
            results.append({"role": "tool", "tool_call_id": need(block.get("tool_use_id"), str, f"{at}.tool_use_id"),
                            "content": _result_text(block, at)})
        elif kind not in ("thinking", "redacted_thinking"):
            own = "tool_use" if role == "assistant" else "tool_result"
            raise invalid(f"{at}.type", f"must be text, image, document, thinking or {own} in a {role} message")
    if role == "assistant":
        turn = {"role": "assistant", "content": parts or None}
        return [{**turn, "tool_calls": calls} if calls else turn] if parts or calls else []
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _messages(body: dict) -> list:
    messages = _system(body["system"]) if body.get("system") is not None else []
    for i, message in enumerate(need(body.get("messages"), list, "messages")):
        where = f"messages[{i}]"
        role = need(message, dict, where).get("role")
        if role not in ("user", "assistant", "system"):
            raise invalid(f"{where}.role", "must be 'user', 'assistant' or 'system'")
        content = message.get("content")
        if role == "system":
            messages += _system(content, f"{where}.content")
        elif isinstance(content, str):
            messages.append({"role": role, "content": content})
        else:
            messages += _turn(role, need(content, list, f"{where}.content"), where)
    return messages


def _tools(body: dict, params: dict) -> None:
    """`tools` (client tools with an input schema; Anthropic's own kinds left out) and `tool_choice`."""
    tools = []
    for i, tool in enumerate(optional(body, "tools", list) or ()):
        where = f"tools[{i}]"
        if need(tool, dict, where).get("type") not in (None, "custom"):
            continue
        function = {"name": need(tool.get("name"), str, f"{where}.name"),
                    "parameters": need(tool.get("input_schema"), dict, f"{where}.input_schema")}
        if tool.get("description") is not None:
            function["description"] = need(tool["description"], str, f"{where}.description")
        tools.append({"type": "function", "function": function})
    choice_ = optional(body, "tool_choice", dict)
    if not tools:
        if choice_ and choice_.get("type") == "tool":
            raise invalid("tool_choice.name", "names a tool the request does not give")
        return
    params["tools"] = tools
    if choice_ is not None:
        kind = choice_.get("type")
        if kind not in ("auto", "any", "tool", "none"):
            raise invalid("tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'")
        params["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(kind) or {
            "type": "function", "function": {"name": need(choice_.get("name"), str, "tool_choice.name")}}
        if choice_.get("disable_parallel_tool_use") is True:
            params["parallel_tool_calls"] = False


def to_chat(body: dict, gw: GatewayConfig, counting: bool = False) -> tuple[list, dict]:
    """A Messages request as the chat form's messages and checked parameters (`counting`: a count_tokens
    request, which has no max_tokens)."""
    params: dict = {"model": body.get("model")}
    if not counting:
        most = need(body.get("max_tokens"), int, "max_tokens")
        if most < 1:
            raise invalid("max_tokens", "must be at least 1")
        params["max_tokens"] = min(most, gw.max_output_tokens)
    for name, key in (("temperature", "temperature"), ("top_p", "top_p"), ("stop_sequences", "stop")):
        if body.get(name) is not None:
            params[key] = body[name]
    _tools(body, params)
    return checked({**params, "messages": _messages(body)}, gw)


def as_message(payload: dict, body: dict) -> dict:
    """A chat answer as a Message: its text and tool_use blocks, why it stopped, and its tokens."""
    said, finish = choice(payload)
    calls = tool_calls(said)
    content: list = [{"type": "text", "text": said["content"]}] if isinstance(said.get("content"), str) \
        and said["content"] else []
    for i, (call_id, name, args) in enumerate(calls):
        content.append({"type": "tool_use", "id": call_id or answer_id(f"toolu_{i}_", payload), "name": name,
                        "input": arguments(args)})
    used = Tokens.of(payload)
    return {"id": answer_id("msg_", payload), "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": "tool_use" if calls else _STOPS.get(finish, "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": used.uncached, "output_tokens": used.output,
                      "cache_read_input_tokens": used.cache_read, "cache_creation_input_tokens": used.cache_write}}


def message_events(answer: dict) -> list[Event]:
    """A Message as the events a streamed one comes in: its start, each block's start, delta and stop, the
    stop reason with the usage, and its end."""
    started = {**answer, "content": [], "stop_reason": None, "usage": {**answer["usage"], "output_tokens": 0}}
    events: list[Event] = [("message_start", {"type": "message_start", "message": started})]
    for i, block in enumerate(answer["content"]):
        if block["type"] == "text":
            opened, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}),
                   ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": i})]
    return events + [("message_delta", {"type": "message_delta", "usage": answer["usage"], "delta": {
        "stop_reason": answer["stop_reason"], "stop_sequence": None}}), ("message_stop", {"type": "message_stop"})]


def anthropic_error(status: int, message: str, kind: str) -> Reply:
    """An error in Anthropic's shape, its type by status as Anthropic names them."""
    named = _ERRORS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return Reply(status, {"type": "error", "error": {"type": named, "message": message}}, retry_headers(kind))


def _model(body: dict) -> str:
    return requested_model(body, "messages", list, "a Messages request needs a model string and a messages list")


class Messages:
    name = "messages"
    paths = ("/v1/messages", "/messages")
    counts = False
    model = staticmethod(_model)
    request = staticmethod(to_chat)
    reply = staticmethod(as_message)
    events = staticmethod(message_events)
    error = staticmethod(anthropic_error)

    streams = staticmethod(asks_to_stream)


class CountTokens:
    """POST /v1/messages/count_tokens: how many tokens a Messages request's prompt holds."""

    name = "messages_count_tokens"
    paths = ("/v1/messages/count_tokens", "/messages/count_tokens")
    counts = True
    model = staticmethod(_model)
    error = staticmethod(anthropic_error)

    @staticmethod
    def request(body: dict, gw: GatewayConfig) -> tuple[list, dict]:
        return to_chat(body, gw, counting=True)

    @staticmethod
    def reply(payload: dict, body: dict) -> dict:
        return {"input_tokens": Tokens.of(payload).prompt}

    @staticmethod
    def streams(body: dict) -> bool:
        return False

    @staticmethod
    def events(answer: dict) -> list[Event]:
        return []
