"""A real Anthropic Messages API server for tests and benchmarks, with the provider's prompt cache.

Stdlib only. POST /v1/messages answers with scripted replies (text, or content blocks such as
tool_use) and reports usage as Anthropic does, prompt caching included, so that litellm's real
Anthropic path and the gateway's cache marks are exercised instead of a mock of them:

    with FakeAnthropic() as server:
        server.set_replies(["first", [{"type": "tool_use", "name": "bash", "input": {"command": "ls"}}]])
        litellm.completion(model="anthropic/claude-sonnet-4-5", api_base=server.base_url, ...)

The prompt cache follows Anthropic's documentation:

- A prompt is a list of blocks, in the order tools, system, messages; each tool, each system block
  and each content block of a message is one block (string content: one text block).
- A block with `cache_control` ({"type": "ephemeral"}, optional "ttl" "5m" or "1h") is a breakpoint:
  the prompt's prefix through it may be cached. At most 4 breakpoints a request, and no "1h" one
  after a "5m" one; otherwise the request is refused with 400, as the API refuses it.
- A prefix of fewer than `min_tokens` tokens is never cached (1024 for Sonnet).
- The longest remembered prefix that ends at a breakpoint or at one of the LOOKBACK blocks before
  one is read (`cache_read_input_tokens`), and its lifetime starts again. The tokens after it
  through the last breakpoint long enough to cache are written (`cache_creation_input_tokens`,
  split by lifetime in `cache_creation`), and every such breakpoint's prefix is remembered for its
  ttl. `input_tokens` is the rest of the prompt.
- A prefix is known by its model and its blocks without their cache_control: moving a mark does
  not change what is cached.

Tokens are counted by a fake tokenizer whose counts add up over blocks: a text block's text, or any
other block's JSON, at 4 characters a token (rounded up).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from support.fake_http import FakeServer, Handler

Responder = Callable[[dict], Any]

DEFAULT_REPLY = "This is a fake reply."
MESSAGES_PATHS = ("/v1/messages", "/messages")
MAX_BREAKPOINTS = 4
LOOKBACK = 20  # blocks before a breakpoint where the API also looks for a cached prefix
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
SONNET_MIN_TOKENS = 1024  # the shortest prefix Claude Sonnet caches


class BadRequest(Exception):
    """A request the API refuses with 400 invalid_request_error."""


def tokens(block: dict) -> int:
    """The fake tokenizer: a text block's text, or the block's JSON, at 4 characters a token."""
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return math.ceil(len(block["text"]) / 4)
    plain = {k: v for k, v in block.items() if k != "cache_control"}
    return math.ceil(len(json.dumps(plain, sort_keys=True)) / 4)


def prompt_blocks(body: dict) -> list[tuple[list, dict]]:
    """The request's blocks in the order the API caches them: (what the block is, the block). What a block is
    holds its place (tools, system, or a message's role and whether it starts the message), so a prefix is
    the same only where the prompt is the same up to there."""
    blocks = []
    for tool in body.get("tools") or []:
        blocks.append((["tool"], tool))
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        blocks.append((["system"], block))
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for i, block in enumerate(parts):
            blocks.append((["message", message.get("role"), i == 0], block))
    return blocks


def _breakpoint(block: dict) -> str | None:
    """The ttl of a block's cache_control, or None when it has none; BadRequest when it is malformed."""
    mark = block.get("cache_control")
    if mark is None:
        return None
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral" or set(mark) - {"type", "ttl"}:
        raise BadRequest(f"cache_control: invalid value {json.dumps(mark)[:100]}")
    ttl = mark.get("ttl", "5m")
    if ttl not in TTL_SECONDS:
        raise BadRequest(f"cache_control.ttl: must be one of '5m', '1h', got {str(ttl)[:20]!r}")
    return ttl


class PromptCache:
    """The provider's prompt cache: prefixes remembered per model until their ttl runs out."""

    def __init__(self, min_tokens: int, clock: Callable[[], float]):
        self.min_tokens = min_tokens
        self.clock = clock
        self._entries: dict[str, tuple[float, float]] = {}  # prefix hash -> (expires at, its ttl in seconds)
        self._lock = threading.Lock()

    def usage(self, body: dict) -> dict:
        """The usage of a request, its cache read and written; BadRequest as the API refuses marks."""
        blocks = prompt_blocks(body)
        hashes, totals, marks = [], [], []
        digest, total = hashlib.sha256(str(body.get("model")).encode()).hexdigest(), 0
        for i, (where, block) in enumerate(blocks):
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest = hashlib.sha256((digest + json.dumps([where, plain], sort_keys=True)).encode()).hexdigest()
            total += tokens(block)
            hashes.append(digest)
            totals.append(total)
            ttl = _breakpoint(block)
            if ttl is not None:
                marks.append((i, ttl))
        if len(marks) > MAX_BREAKPOINTS:
            raise BadRequest(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                             f"Found {len(marks)}.")
        if any(a == "5m" and b == "1h" for (_, a), (_, b) in zip(marks, marks[1:])):
            raise BadRequest("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block")
        with self._lock:
            now = self.clock()
            read = 0
            for i, _ in marks:
                for j in range(i, max(i - LOOKBACK, -1), -1):
                    entry = self._entries.get(hashes[j])
                    if entry and entry[0] > now and totals[j] > read:
                        read = totals[j]
                        self._entries[hashes[j]] = (now + entry[1], entry[1])
                        break
            written = {"5m": 0, "1h": 0}
            cached_to = read
            for i, ttl in marks:
                if totals[i] < self.min_tokens:
                    continue
                if totals[i] > cached_to:
                    written[ttl] += totals[i] - cached_to
                    cached_to = totals[i]
                seconds = TTL_SECONDS[ttl]
                old = self._entries.get(hashes[i])
                self._entries[hashes[i]] = (now + seconds, max(seconds, old[1] if old else 0.0))
        return {"input_tokens": total - cached_to, "cache_creation_input_tokens": sum(written.values()),
                "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": written["5m"],
                                   "ephemeral_1h_input_tokens": written["1h"]}}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class FakeAnthropic(FakeServer):
    """Anthropic's Messages API on 127.0.0.1 with scripted replies and a prompt cache."""

    thread_name = "fake-anthropic"

    def __init__(self, responder: Responder | None = None, min_tokens: int = SONNET_MIN_TOKENS):
        super().__init__()
        self.requests: list[dict] = []  # one record per HTTP request, in arrival order
        self.usages: list[dict] = []  # the usage of each answered request, in order
        self._offset = 0.0  # seconds `advance` moved the cache's clock on
        self.cache = PromptCache(min_tokens, lambda: time.monotonic() + self._offset)
        self._responder: Responder = responder or (lambda body: DEFAULT_REPLY)

    @property
    def base_url(self) -> str:
        """Where litellm's Anthropic provider reaches it (ANTHROPIC_API_BASE or api_base)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def count(self) -> int:
        """Requests answered with a message."""
        with self._lock:
            return len(self.usages)

    def set_responder(self, fn: Responder) -> None:
        with self._lock:
            self._responder = fn

    def set_replies(self, replies: Iterable) -> None:
        """Serve replies in order (a string, or a list of content blocks); once exhausted, the last repeats."""
        queue = list(replies)
        if not queue:
            raise ValueError("set_replies needs at least one reply")
        position = iter(range(len(queue)))
        lock = threading.Lock()

        def scripted(body: dict):
            with lock:
                return queue[next(position, len(queue) - 1)]

        self.set_responder(scripted)

    def advance(self, seconds: float) -> None:
        """Move the prompt cache's clock on, so entries expire without waiting."""
        self._offset += seconds

    def reset(self) -> None:
        """Forget requests, usages, replies and the prompt cache."""
        with self._lock:
            self.requests.clear()
            self.usages.clear()
            self._responder = lambda body: DEFAULT_REPLY
        self.cache.clear()

    def handler_class(self) -> type[Handler]:
        return _Handler

    def answer(self, body: dict) -> dict:
        """The message answering a request body; BadRequest where the API refuses it."""
        if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list) \
                or type(body.get("max_tokens")) is not int:
            raise BadRequest("model, messages and max_tokens are required")
        usage = self.cache.usage(body)
        with self._lock:
            responder = self._responder
        reply = responder(body)
        blocks = [{"type": "text", "text": reply}] if isinstance(reply, str) else [
            {**b, "id": b.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"} if b.get("type") == "tool_use" else b
            for b in reply]
        usage["output_tokens"] = max(1, sum(tokens(b) for b in blocks))
        usage["service_tier"] = "standard"
        with self._lock:
            self.usages.append(usage)
        return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                "model": body["model"], "content": blocks,
                "stop_reason": "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn",
                "stop_sequence": None, "usage": usage}


def _error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


class _Handler(Handler):
    fake: FakeAnthropic
    # Headers and body go out as two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK, 40 ms a reply.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        server = self.fake
        path = self.route()
        body = self.read_json()
        headers = self.lower_headers()
        with server._lock:
            server.requests.append({"path": path, "headers": headers, "json": body, "time": time.time()})
        if path not in MESSAGES_PATHS:
            return self.send_json(404, _error("not_found_error", f"no route {path}"))
        if not headers.get("x-api-key") and not headers.get("authorization"):
            return self.send_json(401, _error("authentication_error", "x-api-key header is required"))
        if not isinstance(body, dict):
            return self.send_json(400, _error("invalid_request_error", "the body must be a JSON object"))
        try:
            self.send_json(200, server.answer(body))
        except BadRequest as e:
            self.send_json(400, _error("invalid_request_error", str(e)))
