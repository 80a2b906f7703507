"""Prompt caching: the gateway, the trusted side, asks providers to cache the stable prefix of a request.

Providers bill the part of a prompt they read from their cache at about a tenth of the input price.
Anthropic's models (on Anthropic, Bedrock or Vertex) cache only a prefix that ends at a block marked with
`cache_control`, at most MAX_CACHE_MARKS marks a request, the caller's own included; writing a prefix
costs 1.25 times the input price, so a mark pays only where the same prefix is sent again. So the
gateway marks, as far as the caller left room:

1. in a conversation (a request with an assistant turn: a tool loop sends all of it again each turn) its
   last message, so the next turn reads everything but its own new messages from the cache;
2. the last system message: the instructions every row of a task agent shares, and a meta agent's own;
3. in a conversation, the message before its last assistant turn: where the previous turn's request
   ended, so that turn's write is found also by a provider that looks back only a few blocks.

A single question (no assistant turn) gets no mark on its own message: that prefix would be written at
1.25 times the price and never read. Where a caller set a one-hour mark, the gateway marks nothing before
it (Anthropic refuses a five-minute mark before a one-hour one). Models that take no marks get none, and
lose the caller's: litellm turns them into Gemini context caches, calls of its own the gateway would not
see. OpenAI caches long prefixes by itself; a request to OpenAI's own API carries a prompt_cache_key of
its session, so one meta agent's turns meet the same cache.

The gateway marks a request after taking its replay key (core.py, forwarding.py): marks never change which
answer a request replays.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from urllib.parse import urlsplit

from services.errors import UserError
from services.gateway.params import MAX_CACHE_MARKS
from services.gateway.sessions import Session
from services.local_model import is_local
from services.provider import LITELLM, Provider

EPHEMERAL = {"type": "ephemeral"}  # Anthropic's five-minute cache, refreshed by every read
_SYSTEM = ("system", "developer")  # litellm sends both as the provider's system prompt, before the messages
_CLAUDE_HOSTS = ("bedrock", "bedrock_converse", "vertex_ai")  # clouds where litellm passes marks to Claude

# Which requests each `gateway.cache` mode replays from the cache, by a request's parameters; the
# config accepts these names (services.config.CACHE_MODES; tests/test_layers.py checks both agree).
REPLAYS: dict[str, Callable[[dict], bool]] = {
    "temperature0": lambda params: params.get("temperature") == 0,  # deterministic requests only
    "all": lambda params: True,
    "off": lambda params: False,
}


def takes_marks(model: str, provider: Provider = LITELLM) -> bool:
    """Whether `provider` (the gateway's; litellm by default) sends `model`'s cache_control marks on as the
    model's provider's cache breakpoints: the family it finds for the model decides."""
    if is_local(model):
        return False
    try:
        family = provider.family(model)
    except UserError:
        return False
    return family == "anthropic" or (family in _CLAUDE_HOSTS and "claude" in model.lower())


def _openai_hosted(model: str) -> bool:
    """Whether a call of `model` goes to OpenAI's own API (one to another server of OpenAI's kind carries
    no prompt_cache_key: a strict server refuses fields it does not know)."""
    if is_local(model) or not model.startswith("openai/"):
        return False
    base = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
    host = urlsplit(base).hostname if base else "api.openai.com"
    return host is None or host == "openai.com" or host.endswith(".openai.com")


def forwarded(model: str, session: Session, messages: list, params: dict, on: bool,
              provider: Provider = LITELLM) -> tuple[list, dict]:
    """The messages and parameters a checked request of `session` is forwarded with: marked for a model
    that takes marks when `on`, without the caller's marks for one that does not, with the session's
    prompt_cache_key to OpenAI when `on`."""
    if takes_marks(model, provider):
        return (marked(messages) if on else messages), params
    if any(_marks(m) for m in messages):
        messages = [_unmarked(m) for m in messages]
    if on and _openai_hosted(model):
        scope = f"{session.run_id}\0{session.node}\0{session.role}".encode()
        params = {**params, "prompt_cache_key": "hyperagents-" + hashlib.sha256(scope).hexdigest()[:24]}
    return messages, params


def marked(messages: list) -> list:
    """`messages` with the gateway's cache breakpoints (see the module's docstring) where the caller's leave
    room; the caller's messages are copied where marked, never changed."""
    free = MAX_CACHE_MARKS - sum(_marks(m) for m in messages)
    if free <= 0:
        return messages
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    systems = [i for i, m in enumerate(messages) if m["role"] in _SYSTEM]
    wanted = ([len(messages) - 1] if assistants else []) + systems[-1:] + [assistants[-1] - 1 if assistants else -1]
    long_marks = [_order(messages, i) for i, m in enumerate(messages) if _marks(m, ttl="1h")]
    after = max(long_marks, default=(-1, -1))
    out, done = list(messages), set()
    for i in wanted:
        if free == 0 or i < 0 or i in done or _marks(messages[i]) or _order(messages, i) <= after:
            continue
        mark = _with_mark(messages[i])
        if mark is not None:
            out[i] = mark
            done.add(i)
            free -= 1
    return out


def _order(messages: list, i: int) -> tuple[int, int]:
    """Where message `i` falls in the prompt the provider reads: system messages first, then the rest."""
    return (messages[i]["role"] not in _SYSTEM, i)


def _marks(message: dict, ttl: str | None = None) -> int:
    """The caller's cache marks in a checked message (only text parts carry them; params.py), of `ttl` if
    given."""
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if part.get("cache_control") is not None
               and (ttl is None or part["cache_control"].get("ttl") == ttl))


def _unmarked(message: dict) -> dict:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [{k: v for k, v in part.items() if k != "cache_control"} for part in content]}


def _with_mark(message: dict) -> dict | None:
    """A copy of `message` whose last block ends a cached prefix; None when it has no text to mark."""
    content = message.get("content")
    if message["role"] == "tool" and content:
        return {**message, "cache_control": EPHEMERAL}  # litellm puts it on the tool result block
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]} \
            if content else None
    last = max((j for j, part in enumerate(content or ()) if part.get("text")), default=None)
    if last is None:
        return None
    parts: list = list(content or ())
    parts[last] = {**parts[last], "cache_control": EPHEMERAL}
    return {**message, "content": parts}
