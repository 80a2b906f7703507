"""Reading a caller's JSON of another protocol's shape into the chat form, and the chat answer back.

Every value a protocol file reads of a request goes through `need`, which names the field in its one 400
when the value is not of the kind wanted; the chat form made of them is then checked as every chat request
is (params.py). The answer's tokens are read here once for every protocol (`Tokens`).
"""

from __future__ import annotations

import hashlib
import json
from typing import NamedTuple, TypeVar

from services.gateway.params import Refusal

T = TypeVar("T")
_KINDS = {str: "a string", dict: "an object", list: "a list", bool: "true or false", int: "an integer"}
# What stands for content the gateway does not forward (images, files, audio): a provider would fetch
# their URLs, and most models the run's roles may call read none of it. The conversation goes on without it.
LEFT_OUT = "[{kind} left out: the gateway forwards text only]"


def invalid(where: str, why: str) -> Refusal:
    """A 400 naming the field (its path is the caller's: cut short)."""
    return Refusal(400, f"field {where[:120]!r} {why}")


def need(value: object, kind: type[T], where: str) -> T:
    """`value` when it is of `kind` (an int that is not a bool), else a 400 naming `where`."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise invalid(where, f"must be {_KINDS.get(kind, kind.__name__)}")
    return value


def optional(body: dict, key: str, kind: type[T], where: str = "") -> T | None:
    """`body[key]` of `kind`, or None when it is missing or null."""
    value = body.get(key)
    return None if value is None else need(value, kind, f"{where}{key}")


def arguments(text: object) -> dict:
    """A tool call's arguments (a JSON text, as the chat form carries them) as an object; text that is no
    JSON object (a model's slip) comes back whole under "arguments", for the agent to report."""
    try:
        value = json.loads(text) if isinstance(text, str) and text.strip() else {}
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {"arguments": text}


def answer_id(prefix: str, payload: dict) -> str:
    """A stable id for an answer: the same for its replays from the cache."""
    seed = str(payload.get("id") or json.dumps(payload, sort_keys=True))
    return prefix + hashlib.sha256(seed.encode()).hexdigest()[:24]


def choice(payload: dict) -> tuple[dict, str]:
    """The first choice's message and finish reason of a chat answer."""
    choices = payload.get("choices")
    first = mapping(choices[0] if isinstance(choices, list) and choices else None)
    return mapping(first.get("message")), str(first.get("finish_reason") or "stop")


def tool_calls(message: dict) -> list[tuple[str, str, str]]:
    """(id, name, arguments text) of each function call in a chat answer's message."""
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append((str(call.get("id") or ""), str(function.get("name") or ""),
                          str(function.get("arguments") or "")))
    return calls


def mapping(value: object) -> dict:
    """`value` when it is an object, else an empty one (for reading an answer, which may lack a part)."""
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


class Tokens(NamedTuple):
    """What an answer used: its prompt tokens (all of them), its output, and of the prompt those read from
    and written to the provider's prompt cache."""

    prompt: int
    output: int
    cache_read: int
    cache_write: int

    @classmethod
    def of(cls, payload: dict) -> Tokens:
        """Read where litellm puts every provider's counts (OpenAI's places, and Anthropic's names)."""
        usage = mapping(payload.get("usage"))
        details = mapping(usage.get("prompt_tokens_details"))
        return cls(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                   _count(details.get("cached_tokens")) or _count(usage.get("cache_read_input_tokens")),
                   _count(details.get("cache_creation_tokens")) or _count(usage.get("cache_creation_input_tokens")))

    @property
    def uncached(self) -> int:
        """The prompt tokens neither read from the cache nor written to it (Anthropic's input_tokens)."""
        return max(0, self.prompt - self.cache_read - self.cache_write)
