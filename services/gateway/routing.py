"""Where a model's call goes: the bundled local model's own server, or the model's provider.

A local model (services/local_model.py) is served by a llama.cpp server this gateway starts on its first
call and stops with the gateway; the provider reaches it as an OpenAI-compatible server, with the prompt
cut to fit its context and a bound on the reply. Every other model goes to its provider as named.
"""

from __future__ import annotations

import threading
from pathlib import Path

from services.config import GatewayConfig
from services.local_model import LocalServer, fit_messages, is_local
from services.provider import Route


class Routes:
    def __init__(self, gw: GatewayConfig, folder: Path) -> None:
        self.gw = gw
        self.folder = folder  # the run's folder: local_model.log goes there
        self._lock = threading.Lock()
        self._local: dict[str, LocalServer] = {}  # local model -> its server, started on first use

    def route(self, model: str, messages: list, params: dict) -> tuple[Route, list, dict]:
        """Where a checked request for `model` goes, and the messages and parameters it goes with."""
        if not is_local(model):
            return Route(model), messages, params
        server = self.server(model, start=True)
        assert server is not None
        server.ensure_started()
        n_ctx = server.n_ctx
        max_tokens = params.get("max_tokens") or params["max_completion_tokens"]  # the gateway sets one
        params = {k: v for k, v in params.items() if k not in ("max_completion_tokens", "tools", "tool_choice")}
        params["max_tokens"] = min(int(max_tokens), n_ctx // 2)
        route = Route(f"openai/{server.alias}", server.api_base, server.api_key)
        return route, fit_messages(messages, n_ctx, params["max_tokens"]), params

    def server(self, model: str, start: bool = False) -> LocalServer | None:
        """The server of local `model` (made, not yet started, with `start`); None when there is none."""
        with self._lock:
            server = self._local.get(model)
            if server is None and start:
                server = self._local[model] = LocalServer(model, self.gw.local_context, self.gw.local_threads,
                                                          self.folder / "local_model.log")
            return server

    def health(self, model: str) -> str | None:
        """Why `model`'s server is dead (it ended by itself), or None: the breaker trips at once on it."""
        server = self.server(model)
        return server.dead_reason() if server is not None else None

    def stop(self) -> None:
        with self._lock:
            servers = list(self._local.values())
        for server in servers:
            server.stop()
