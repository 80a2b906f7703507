"""What a caller may send the gateway (the request allowlist), and the request in the one form that
its cache key and its prompt's worst case are taken from.

A caller holds only a session key, and litellm reads many request fields as routing,
credentials, headers, callbacks or canned answers (api_base, api_key, extra_headers,
mock_response, metadata, ...). So a request may carry only the OpenAI chat parameters of
`_PARAMS`, each type-checked and capped; any other field is refused by name. Plain dict and
type checks: they run on every call of the throughput bench.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from services.config import GatewayConfig

# Parameters that do not change what the model answers, so do not split the cache.
_NOT_IN_CACHE_KEY = ("user",)


class Refusal(Exception):
    """A request answered with an error status before any provider call; booked as refused."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _invalid(name: str, why: str) -> Refusal:
    """A 400 naming the field (names are the caller's: cut short)."""
    return Refusal(400, f"field {name[:100]!r} {why}")


_KINDS = {str: "a string", dict: "an object", list: "a list", bool: "true or false"}
# A request's values are the caller's JSON, typed `object` until a check has narrowed them.
_Check = Callable[[str, object, GatewayConfig], object]


def _shaped(name: str, value: object, shape: dict[str, type], required: tuple[str, ...] = ()) -> dict:
    """`value` as an object with only the keys of `shape`, each of the type it names (null passes, as in
    the OpenAI API), and the `required` ones set."""
    if not isinstance(value, dict):
        raise _invalid(name, "must be an object")
    for key, item in value.items():
        kind = shape.get(key)
        if kind is None:
            raise _invalid(f"{name}.{key}", "is not allowed")
        if item is not None and not isinstance(item, kind):
            raise _invalid(f"{name}.{key}", f"must be {_KINDS[kind]}")
    for key in required:
        if value.get(key) is None:
            raise _invalid(f"{name}.{key}", "is missing")
    return value


def _number(low: float, high: float) -> _Check:
    """A check of a number from `low` to `high` (NaN and infinities fail it)."""
    def check(name: str, value: object, gw: GatewayConfig) -> object:
        if not isinstance(value, int | float) or type(value) is bool or not low <= value <= high:
            raise _invalid(name, f"must be a number from {low} to {high}")
        return value
    return check


def _integer(low: int, high: int | str) -> _Check:
    """A check of an integer from `low` to `high`: a number, or the name of the gateway setting that caps it."""
    def check(name: str, value: object, gw: GatewayConfig) -> object:
        top = getattr(gw, high) if isinstance(high, str) else high
        if not isinstance(value, int) or type(value) is bool or not low <= value <= top:
            setting = f" (gateway.{high})" if isinstance(high, str) else ""
            raise _invalid(name, f"must be an integer from {low} to {top}{setting}")
        return value
    return check


def _one_of(*choices: str) -> _Check:
    """A check of one of the strings `choices`."""
    def check(name: str, value: object, gw: GatewayConfig) -> object:
        if not isinstance(value, str) or value not in choices:
            raise _invalid(name, "must be one of " + ", ".join(map(repr, choices)))
        return value
    return check


def _boolean(name: str, value: object, gw: GatewayConfig) -> object:
    """A check of true or false."""
    if type(value) is not bool:
        raise _invalid(name, "must be true or false")
    return value


def _user(name: str, value: object, gw: GatewayConfig) -> object:
    """A check of the caller's end-user id: a short string."""
    if not isinstance(value, str) or len(value) > 256:
        raise _invalid(name, "must be a string of at most 256 characters")
    return value


def _stop(name: str, value: object, gw: GatewayConfig) -> object:
    """A check of stop sequences: a string or up to 4 of them, as OpenAI takes."""
    if isinstance(value, str) or (isinstance(value, list) and len(value) <= 4
                                  and all(isinstance(s, str) for s in value)):
        return value
    raise _invalid(name, "must be a string or a list of at most 4 strings")


_MAX_TOOLS = 128  # OpenAI's own limit
_TOOL = {"type": str, "function": dict}
_FUNCTION = {"name": str, "description": str, "parameters": dict, "strict": bool}


def _tools(name: str, value: object, gw: GatewayConfig) -> object:
    """A check of tools: plain functions with a JSON schema. Other kinds (MCP servers, web search,
    code interpreters) make a provider or litellm reach out by themselves."""
    if not isinstance(value, list) or len(value) > _MAX_TOOLS:
        raise _invalid(name, f"must be a list of at most {_MAX_TOOLS} tools")
    for i, tool in enumerate(value):
        where = f"{name}[{i}]"
        tool = _shaped(where, tool, _TOOL, required=("type", "function"))
        if tool["type"] != "function":
            raise _invalid(f"{where}.type", "must be 'function'")
        _shaped(f"{where}.function", tool["function"], _FUNCTION, required=("name",))
    return value


def _tool_choice(name: str, value: object, gw: GatewayConfig) -> object:
    """A check of "none", "auto", "required" or {"type": "function", "function": {"name": ...}}."""
    if value in ("none", "auto", "required"):
        return value
    if isinstance(value, str):
        raise _invalid(name, "must be 'none', 'auto', 'required' or a function to call")
    value = _shaped(name, value, _TOOL, required=("type", "function"))
    if value["type"] != "function":
        raise _invalid(f"{name}.type", "must be 'function'")
    _shaped(f"{name}.function", value["function"], {"name": str}, required=("name",))
    return value


# "schema" on json_object: how agent/llm.py asks a local model's server for constrained decoding.
_FORMATS = {"text": {"type": str}, "json_object": {"type": str, "schema": dict},
            "json_schema": {"type": str, "json_schema": dict}}
_JSON_SCHEMA = {"name": str, "description": str, "schema": dict, "strict": bool}


def _response_format(name: str, value: object, gw: GatewayConfig) -> object:
    """A check of {"type": "text" | "json_object" (with an optional "schema") | "json_schema", ...}."""
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind not in _FORMATS:
        raise _invalid(name, "must be an object whose type is " + ", ".join(map(repr, _FORMATS)))
    value = _shaped(name, value, _FORMATS[kind], required=("json_schema",) if kind == "json_schema" else ())
    if kind == "json_schema":
        _shaped(f"{name}.json_schema", value["json_schema"], _JSON_SCHEMA, required=("name",))
    return value


_PARAMS: dict[str, _Check] = {
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "max_tokens": _integer(1, "max_output_tokens"),
    "max_completion_tokens": _integer(1, "max_output_tokens"),
    "n": _integer(1, "max_n"),
    "stop": _stop,
    "seed": _integer(-2**63, 2**63 - 1),
    "tools": _tools,
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _boolean,
    "response_format": _response_format,
    "reasoning_effort": _one_of("minimal", "low", "medium", "high"),
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "logprobs": _boolean,
    "top_logprobs": _integer(0, 20),
    "user": _user,
}
# Checked by the chat protocol (inbound/chat.py) and `Admission.admit`, never forwarded as they are:
# litellm's OpenAI-compatible clients send "stream": false by themselves.
_ADMITTED = ("model", "messages", "stream")

_ROLES = ("system", "user", "assistant", "tool", "developer")
_MESSAGE = {"role": str, "content": object, "name": str, "tool_calls": list, "tool_call_id": str}
_TEXT_PART = {"type": str, "text": str, "cache_control": dict}
# A prompt-cache breakpoint of Anthropic's API, the one kind a caller may set, and only on a text part:
# litellm reads marks elsewhere (tools, whole messages) in ways of its own, and turns them into Gemini
# context caches, calls of its own that the gateway would not see.
_CACHE_CONTROL = {"type": str, "ttl": str}
CACHE_TTLS = ("5m", "1h")  # the lifetimes Anthropic's API takes
MAX_CACHE_MARKS = 4  # breakpoints one Anthropic request may hold, the caller's and the gateway's together
_TOOL_CALL = {"id": str, "type": str, "function": dict}
# Fields of a response's message (and its tool calls) that agents send back when they append
# `message.model_dump()` to their history: dropped, never forwarded, and not an error.
_ECHOED = frozenset(("provider_specific_fields", "refusal", "annotations", "audio", "function_call",
                     "reasoning_content", "thinking_blocks", "index"))
_CALLED = {"name": str, "arguments": str}


def check_cache_control(name: str, value: dict) -> None:
    """A check of a text part's cache breakpoint: {"type": "ephemeral"} with an optional ttl the provider takes."""
    _shaped(name, value, _CACHE_CONTROL, required=("type",))
    if value["type"] != "ephemeral":
        raise _invalid(f"{name}.type", "must be 'ephemeral'")
    if "ttl" in value and value["ttl"] not in CACHE_TTLS:  # a null too: litellm would send it on as it is
        raise _invalid(f"{name}.ttl", "must be one of " + ", ".join(map(repr, CACHE_TTLS)))


def _content(name: str, value: object) -> int:
    """A check of a message's content: a string, null, or text parts (no images or files: a provider fetches
    their URLs); the number of cache breakpoints its parts set."""
    if value is None or isinstance(value, str):
        return 0
    if not isinstance(value, list):
        raise _invalid(name, "must be a string, a list of text parts or null")
    marks = 0
    for i, part in enumerate(value):
        _shaped(f"{name}[{i}]", part, _TEXT_PART, required=("type", "text"))
        if part["type"] != "text":
            raise _invalid(f"{name}[{i}].type", "must be 'text'")
        if part.get("cache_control") is not None:
            check_cache_control(f"{name}[{i}].cache_control", part["cache_control"])
            marks += 1
        elif "cache_control" in part:  # null, "not set": litellm would send it on as null, which Anthropic refuses
            del part["cache_control"]
    return marks


def _without_echoes(value: object) -> object:
    """A message or tool call without the response-only fields of `_ECHOED`."""
    if isinstance(value, dict) and not _ECHOED.isdisjoint(value):
        return {k: v for k, v in value.items() if k not in _ECHOED}
    return value


def _messages(value: list) -> list:
    """The messages, checked: known roles, text content, and the assistant's tool calls."""
    if not value:
        raise _invalid("messages", "must not be empty")
    value = [_without_echoes(m) for m in value]
    marks = 0
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        message = _shaped(where, message, _MESSAGE, required=("role",))
        if message.get("tool_calls"):  # a list: `_shaped` checked it
            message["tool_calls"] = [_without_echoes(call) for call in message["tool_calls"]]
        if message["role"] not in _ROLES:
            raise _invalid(f"{where}.role", "must be one of " + ", ".join(map(repr, _ROLES)))
        marks += _content(f"{where}.content", message.get("content"))
        for j, call in enumerate(message.get("tool_calls") or ()):
            at = f"{where}.tool_calls[{j}]"
            call = _shaped(at, call, _TOOL_CALL, required=("id", "type", "function"))
            if call["type"] != "function":
                raise _invalid(f"{at}.type", "must be 'function'")
            _shaped(f"{at}.function", call["function"], _CALLED, required=("name", "arguments"))
    if marks > MAX_CACHE_MARKS:
        raise _invalid("messages", f"sets {marks} cache_control breakpoints; at most {MAX_CACHE_MARKS} are allowed")
    return value



def checked(body: dict, gw: GatewayConfig) -> tuple[list, dict]:
    """The request's messages and its parameters, each on the allowlist, type-checked and capped."""
    params = {}
    for name, value in body.items():
        if name in _ADMITTED:
            continue
        check = _PARAMS.get(name)
        if check is None:
            raise _invalid(name, "is not allowed")
        if value is not None:  # null is how some clients say "not set"
            params[name] = check(name, value, gw)
    return _messages(body["messages"]), params


def canonical(model: str, messages: list, params: dict) -> str:
    """The request as one ASCII JSON text: its cache key is a hash of it, and its length bounds the prompt's
    tokens (a token is at least a byte of text; the JSON around each message outweighs the few tokens a
    provider's chat template adds)."""
    keyed = {k: v for k, v in params.items() if k not in _NOT_IN_CACHE_KEY}
    return json.dumps({**keyed, "model": model, "messages": messages}, sort_keys=True)
