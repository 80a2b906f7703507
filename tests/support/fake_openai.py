"""A real OpenAI-compatible HTTP server for tests and benchmarks.

Stdlib only, so it runs wherever the suite runs. Replies are scripted and
faults are queued, so litellm's real HTTP path (retries, error mapping,
parsing) is exercised instead of a mock of it.

    with FakeOpenAI() as server:
        server.set_replies(["first", "second"])
        server.add_faults(["429"])
        litellm.completion(model="openai/fake-model", api_base=server.base_url, ...)
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from support.fake_http import FakeServer, Handler

Responder = Callable[[dict], "str | dict"]  # a reply's text, or its whole message (tool_calls: a native tool call)

DEFAULT_REPLY = "This is a fake reply."
FAULTS = ("429", "500", "503", "malformed", "empty", "disconnect")
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")


def _default_responder(request_json: dict) -> str:
    return DEFAULT_REPLY


def _validate_fault(fault: str) -> str:
    if fault in FAULTS:
        return fault
    if fault.startswith("slow:"):
        float(fault[len("slow:"):])
        return fault
    raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS} or 'slow:SECONDS'")


def _content_chars(messages: Any) -> int:
    """Characters of all message text, including list-of-parts content."""
    total = 0
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return total


def _error_body(message: str, error_type: str, code: str) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    ).encode()


class FakeOpenAI(FakeServer):
    """OpenAI-compatible server on 127.0.0.1 with scripted replies and faults."""

    thread_name = "fake-openai"

    def __init__(self, responder: Responder | None = None, latency: float = 0.0):
        super().__init__()
        self.latency = latency  # seconds added to every request that is answered normally
        self.requests: list[dict] = []  # one record per HTTP request, in arrival order
        self._responder: Responder = responder or _default_responder
        self._faults: deque[str] = deque()
        self._count = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def count(self) -> int:
        """Chat requests answered with a completion (faulted ones excluded)."""
        with self._lock:
            return self._count

    @property
    def responder(self) -> Responder:
        with self._lock:
            return self._responder

    @responder.setter
    def responder(self, fn: Responder) -> None:
        self.set_responder(fn)

    def set_responder(self, fn: Responder) -> None:
        with self._lock:
            self._responder = fn

    def set_replies(self, replies: Iterable[str]) -> None:
        """Serve replies in order; once exhausted, the last one repeats."""
        queue = list(replies)
        if not queue:
            raise ValueError("set_replies needs at least one reply")
        position = {"next": 0}
        lock = threading.Lock()

        def scripted(request_json: dict) -> str:
            with lock:
                index = min(position["next"], len(queue) - 1)
                position["next"] += 1
            return queue[index]

        self.set_responder(scripted)

    def add_faults(self, faults: Iterable[str]) -> None:
        """Queue faults; each incoming request pops the next one (FIFO)."""
        validated = [_validate_fault(f) for f in faults]
        with self._lock:
            self._faults.extend(validated)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending_faults(self) -> list[str]:
        with self._lock:
            return list(self._faults)

    def reset(self) -> None:
        """Forget requests, faults, latency and scripted replies."""
        with self._lock:
            self.requests.clear()
            self._faults.clear()
            self._count = 0
            self._responder = _default_responder
        self.latency = 0.0

    def handler_class(self) -> type[Handler]:
        return _Handler

    def _record(self, path: str, headers: dict, body: Any, fault: str | None) -> None:
        entry = {"path": path, "headers": headers, "json": body, "fault": fault,
                 "time": time.time()}
        with self._lock:
            self.requests.append(entry)

    def _take_fault(self) -> str | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _completed(self) -> None:
        with self._lock:
            self._count += 1

    def _completion(self, request_json: dict, content: str | dict) -> dict:
        prompt_tokens = max(1, _content_chars(request_json.get("messages")) // 4)
        message = content if isinstance(content, dict) else {"role": "assistant", "content": content}
        completion_tokens = max(1, len(json.dumps(message) if isinstance(content, dict) else content) // 4)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request_json.get("model") or "fake-model",
            "system_fingerprint": "fake",
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _Handler(Handler):
    fake: FakeOpenAI

    def do_GET(self) -> None:
        path = self.route()
        self.fake._record(path, self.lower_headers(), None, None)
        if path in MODELS_PATHS:
            self.send_json(200, {"object": "list", "data": [
                {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
            ]})
        else:
            self._not_found(path)

    def do_POST(self) -> None:
        server = self.fake
        path = self.route()
        body = self.read_json()
        if path not in CHAT_PATHS:
            server._record(path, self.lower_headers(), body, None)
            self._not_found(path)
            return
        fault = server._take_fault()
        server._record(path, self.lower_headers(), body, fault)
        if not isinstance(body, dict):
            self.send_bytes(400, _error_body("request body must be a JSON object",
                                             "invalid_request_error", "invalid_json"))
            return
        if fault is not None and self._apply_fault(fault):
            return
        if server.latency > 0:
            time.sleep(server.latency)
        content = "" if fault == "empty" else server.responder(body)
        server._completed()
        self.send_json(200, server._completion(body, content))

    def _apply_fault(self, fault: str) -> bool:
        """Answer with the fault; False means answer normally afterwards."""
        if fault == "429":
            self.send_bytes(429, _error_body("Rate limit reached (fake).", "rate_limit_error", "rate_limit_exceeded"),
                            {"Retry-After": "0"})
        elif fault in ("500", "503"):
            self.send_bytes(int(fault), _error_body("Server error (fake).", "server_error", "server_error"))
        elif fault == "malformed":
            self.send_bytes(200, b'{"id": "chatcmpl-broken", "choices": [')
        elif fault == "disconnect":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        elif fault.startswith("slow:"):
            time.sleep(float(fault[len("slow:"):]))
            return False
        else:
            return False  # "empty": a normal answer with empty content
        return True

    def _not_found(self, path: str) -> None:
        self.send_bytes(404, _error_body(f"no route {path}", "invalid_request_error", "not_found"))
