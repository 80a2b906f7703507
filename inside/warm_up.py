"""Pay litellm's first-call set-up before the first real call.

litellm builds much of a provider's path on its first use: lazy imports, the HTTP
client, the response models' validators. Paid on a run's first rows, that is tens of
milliseconds per process, in the middle of the first batch. A call to a stub
OpenAI-compatible server on this process's own loopback takes the whole path, request
to parsed response, and costs nothing.

Stdlib and litellm only. The host's gateway runs it: it is the one process of a run that
imports litellm (sandboxed code reaches the gateway with a plain HTTP client, agent/llm.py).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_REPLY = json.dumps({
    "id": "warm-up", "object": "chat.completion", "created": 0, "model": "warm-up",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()


STUB_THREAD = "litellm-warm-up-stub"


class _Stub(BaseHTTPRequestHandler):
    # HTTP/1.0: the connection closes after the reply, so no handler thread outlives the warm-up.
    protocol_version = "HTTP/1.0"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(_REPLY)))
        self.end_headers()
        self.wfile.write(_REPLY)

    def log_message(self, *args) -> None:
        pass


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True


class _LazyEncoding:
    """litellm's default tokenizer, loaded on its first use."""

    def __init__(self, load):
        self._load = load
        self._encoding = None
        self._lock = threading.Lock()

    def __getattr__(self, name):
        with self._lock:
            if self._encoding is None:
                self._encoding = self._load()
        return getattr(self._encoding, name)


def defer_tokenizer(litellm) -> bool:
    """Make litellm load its default tokenizer when something counts tokens with it, not on the
    first completion; True when done.

    Every completion hands `litellm.main.encoding` to the provider's code, which counts with it
    only when a response carries no usage, and fetching it loads tiktoken's cl100k_base: the
    largest part of litellm's first call (over a second here). Nothing changes where litellm's
    internals are not the ones this was written for, or the tokenizer is loaded already.
    """
    main = sys.modules.get(f"{litellm.__name__}.main")
    load = getattr(main, "_load_default_encoding", None)
    if main is None or load is None or "encoding" in vars(main) or getattr(main, "_encoding_cache", True) is not None:
        return False
    setattr(main, "encoding", _LazyEncoding(load))  # noqa: B010 - a module has no declared `encoding` to assign
    return True


def warm_up(litellm, providers) -> list[str]:
    """One completion through each litellm provider in `providers` (e.g. "openai"), answered
    by a stub on 127.0.0.1; returns the providers whose call came back. Failures are ignored:
    then the first real call pays instead. The tokenizer is left to its first use
    (`defer_tokenizer`)."""
    defer_tokenizer(litellm)
    answered: list[str] = []
    try:
        server = _StubServer(("127.0.0.1", 0), _Stub)
    except OSError:
        return answered
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=STUB_THREAD,
                     daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    free = dict.fromkeys(("input_cost_per_token", "output_cost_per_token", "cache_creation_input_token_cost",
                          "cache_read_input_token_cost"), 0.0)
    try:
        for provider in providers:
            try:
                # Priced, so the answer takes the cost path real (priced) models take.
                litellm.register_model({f"{provider}/warm-up": {**free, "litellm_provider": provider, "mode": "chat"}})
                litellm.completion(model=f"{provider}/warm-up", api_base=base, api_key="-", num_retries=0,
                                   timeout=5, messages=[{"role": "user", "content": "-"}])
                answered.append(provider)
            except Exception:
                pass
    finally:
        server.shutdown()
        server.server_close()
    return answered
