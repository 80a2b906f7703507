"""The LLM gateway: the only way out for agent code.

An OpenAI-compatible HTTP endpoint on 127.0.0.1, started per run by the trusted core.
Agent code (task, meta, grader) calls it with plain litellm and a base URL; the
gateway holds the provider keys, forwards with litellm to the real provider, retries
transient errors, replays cached answers, enforces the budget and the run's model
allowlist, and writes every call to the ledger.

A caller authenticates with a session key (`new_session`) that names the run, node
and role its calls are booked to. Sandboxed code gets only such a key, never a
provider key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import secrets
import shutil
import socketserver
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from domains.warm_up import warm_up
from optimizer.config import Config
from optimizer.errors import UserError
from optimizer.ledger import Call, Ledger, Totals
from optimizer.local_model import DEFAULT_MAX_TOKENS, LocalServer, fit_messages, is_local
from optimizer.providers import _litellm, provider_of, redact
from optimizer.rate_limit import CallLimits

SOCKET_DIR_PREFIX = "hyperagents-gw-"  # under the temp folder: a short path, as sun_path holds 108 bytes
# Parameters that change what the model answers; anything else in a request
# (user ids, metadata) does not split the cache.
_NOT_IN_CACHE_KEY = {"user", "metadata", "stream_options"}


class BudgetExceeded(Exception):
    pass


@dataclass
class Session:
    run_id: str
    node: str
    role: str
    max_calls: int | None = None  # e.g. the meta agent's tool-call limit, which its own code could drop
    calls: int = 0


@dataclass
class Reply:
    status: int
    body: dict
    headers: dict


def _error(status: int, message: str, kind: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": kind, "code": status}}, {})


def _account(call: Call, response) -> dict:
    """Put a provider response's tokens and cost (litellm's price table) on `call`; returns its JSON."""
    payload = response.model_dump(mode="json")
    usage = payload.get("usage") or {}
    call.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    call.completion_tokens = int(usage.get("completion_tokens") or 0)
    call.cost_usd = float((getattr(response, "_hidden_params", None) or {}).get("response_cost") or 0.0)
    return payload


def _preflight_problem(exc: Exception, model: str) -> str | None:
    """What a failed first call says about the set-up; None when the provider answered at all
    (a refusal of this tiny request, or a rate limit, still proves it is reachable)."""
    lit = _litellm()
    detail = redact(str(exc)).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    # litellm reports a refused connection to an OpenAI-compatible server as a 500 "Connection error."
    unreachable = any(m in str(exc).lower() for m in ("connection error", "connection refused",
                                                       "name or service not known", "timed out"))
    if isinstance(exc, (lit.APIConnectionError, lit.Timeout)) or unreachable:
        return f"cannot reach the provider of {model}: {detail} (check the network, or the *_API_BASE variable)"
    if isinstance(exc, (lit.AuthenticationError, lit.PermissionDeniedError)):
        return f"the provider refused the key for {model}: {detail}"
    if isinstance(exc, lit.NotFoundError):
        return f"the provider does not know the model {model}: {detail}"
    return None


def _is_transient(exc: Exception) -> bool:
    lit = _litellm()
    transient = (
        lit.RateLimitError,
        lit.InternalServerError,
        lit.ServiceUnavailableError,
        lit.APIConnectionError,
        lit.Timeout,
        lit.BadGatewayError,
    )
    if isinstance(exc, transient):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


class Gateway:
    def __init__(self, config: Config, ledger: Ledger, run_id: str):
        self.config = config
        self.gw = config.gateway
        self.ledger = ledger
        self.run_id = run_id
        self._sessions: dict[str, Session] = {}
        self._allowed: set[str] = set()
        self._limits = CallLimits(self.gw.max_concurrent_calls, self.gw.requests_per_minute)
        self._warmed: set[str] = set()  # litellm providers whose first-call set-up is paid (domains/warm_up.py)
        self._lock = threading.Lock()
        self._spent = ledger.totals(run_id=run_id)
        self._server: ThreadingHTTPServer | None = None
        self._unix_server: _UnixServer | None = None
        self._socket_dir: Path | None = None
        self._local: dict[str, LocalServer] = {}  # local model -> its server, started on first use

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Gateway":
        handler = type("GatewayHandler", (_Handler,), {"gateway": self})
        self._server = _Server((self.gw.host, self.gw.port), handler)
        # Sandboxes have no network: they reach the gateway through this socket, mounted in.
        # Its folder is short-named (sun_path holds 108 bytes) and only traversable by others,
        # so a sandbox user other than ours can connect but not list it.
        remove_dead_socket_dirs()
        self._socket_dir = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
        self._socket_dir.chmod(0o711)
        unix_handler = type("GatewayUnixHandler", (handler,), {"disable_nagle_algorithm": False})
        self._unix_server = _UnixServer(str(self.unix_socket), unix_handler)
        self.unix_socket.chmod(0o666)
        for name, server in (("gateway", self._server), ("gateway-unix", self._unix_server)):
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name,
                             daemon=True).start()
        return self

    def stop(self) -> None:
        for server in (self._server, self._unix_server):
            if server:
                server.shutdown()
                server.server_close()
        self._server = self._unix_server = None
        for server in self._local.values():
            server.stop()
        if self._socket_dir:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def unix_socket(self) -> Path:
        """The gateway's Unix socket, for sandboxes (see optimizer/sandbox/relay.py)."""
        return self._socket_dir / "gateway.sock"

    # -- who may call what -----------------------------------------------------------------
    def allow_models(self, *models: str) -> None:
        """Add models (aliases or provider strings) that callers may request in this run."""
        resolved = {self.config.resolve_model(m) for m in models}
        providers = set()
        for model in resolved - self._allowed:
            if is_local(model):  # free, not a name litellm knows, and reached as an OpenAI server
                providers.add("openai")
                continue
            register_price(model, self.gw.prices.get(model))
            with contextlib.suppress(UserError):
                providers.add(provider_of(model))
        with self._lock:
            self._allowed.update(resolved)
            providers -= self._warmed
            self._warmed |= providers
        if providers:
            threading.Thread(target=warm_up, args=(_litellm(), sorted(providers)), name="gateway-warm-up",
                             daemon=True).start()

    def new_session(self, node: str, role: str, max_calls: int | None = None) -> str:
        """A key that books calls to (run, node, role), answering at most `max_calls`
        requests; hand it to the caller as its API key."""
        key = "gw-" + secrets.token_urlsafe(24)
        with self._lock:
            self._sessions[key] = Session(self.run_id, node, role, max_calls)
        return key

    def spent(self) -> Totals:
        with self._lock:
            return Totals(**vars(self._spent))

    def budget_left_message(self) -> str | None:
        """Why no new call may start, or None while the budget allows one."""
        spent = self.spent()
        if self.gw.budget_usd is not None and spent.cost_usd >= self.gw.budget_usd:
            return f"budget exhausted: spent ${spent.cost_usd:.4f} of ${self.gw.budget_usd:.4f}"
        if self.gw.budget_tokens is not None and spent.tokens >= self.gw.budget_tokens:
            return f"token budget exhausted: spent {spent.tokens} of {self.gw.budget_tokens} tokens"
        return None

    def preflight(self, models: list[str]) -> None:
        """One tiny call to each provider model, so that a wrong key, an unknown model name or an
        unreachable provider stops the run at once with one line, not as an error on every row.
        Local models are checked when their server starts instead."""
        lit = _litellm()
        for model in sorted({self.config.resolve_model(m) for m in models}):
            if is_local(model):
                continue
            started = time.monotonic()
            call = Call(self.run_id, "preflight", "preflight", model)
            try:
                response = lit.completion(model=model, messages=[{"role": "user", "content": "Reply with OK."}],
                                          max_tokens=16, num_retries=0, timeout=60, drop_params=True)
                _account(call, response)
            except Exception as e:
                call.error = redact(f"{type(e).__name__}: {e}")[:2000]
                problem = _preflight_problem(e, model)
                if problem:
                    raise UserError(problem) from None
            finally:
                call.latency_s = time.monotonic() - started
                self._book(call)

    # -- one request -----------------------------------------------------------------------
    def handle_chat(self, api_key: str, body: dict) -> Reply:
        session = self._sessions.get(api_key)
        if session is None:
            return _error(401, "unknown gateway key", "authentication_error")
        with self._lock:
            session.calls += 1
            over = session.max_calls is not None and session.calls > session.max_calls
        if over:
            return _error(429, f"this session's limit of {session.max_calls} model calls is reached",
                          "call_limit_reached")
        requested = body.get("model")
        if not isinstance(requested, str) or not isinstance(body.get("messages"), list):
            return _error(400, "a chat request needs a model string and a messages list", "invalid_request_error")
        model = self.config.resolve_model(requested)
        if model not in self._allowed:
            allowed = ", ".join(sorted(self._allowed)) or "none"
            return _error(403, f"model {requested!r} is not allowed in this run (allowed: {allowed})", "permission_error")
        if body.get("stream"):
            return _error(400, "the gateway does not stream; call without stream=True", "invalid_request_error")
        stop = self.budget_left_message()
        if stop:
            return _error(402, stop, "budget_exceeded")

        params = {k: v for k, v in body.items() if k not in ("model", "messages", "stream")}
        key = self._cache_key(model, body)
        if key:
            hit = self.ledger.cache_get(key)
            if hit:
                self._book(Call(session.run_id, session.node, session.role, model, cache_hit=True))
                return self._reply(json.loads(hit[0]), requested, cost=0.0, cache_hit=True)

        started = time.monotonic()
        call = Call(session.run_id, session.node, session.role, model)
        try:
            response, call.attempts = self._forward(model, body["messages"], params)
        except Exception as e:
            call.latency_s = time.monotonic() - started
            call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            self._book(call)
            status = getattr(e, "status_code", None)
            status = status if isinstance(status, int) and 400 <= status < 600 else 502
            return _error(status, f"provider call for {model} failed: {call.error}", "provider_error")
        call.latency_s = time.monotonic() - started
        payload = _account(call, response)
        self._book(call)
        if key:
            self.ledger.cache_put(key, json.dumps(payload), call.cost_usd)
        return self._reply(payload, requested, cost=call.cost_usd, cache_hit=False)

    def _forward(self, model: str, messages: list, params: dict):
        lit = _litellm()
        route = {"model": model}
        if is_local(model):
            route, messages, params = self._local_route(model, messages, params)
        attempt = 0
        while True:
            attempt += 1
            try:
                if params.get("tools"):
                    # Plain function tools: without this litellm imports its MCP support (the
                    # optional `mcp` package) to inspect them. It is not sent to the provider.
                    params = {**params, "_skip_mcp_handler": True}
                with self._limits.slot(model):  # its wait counts in the call's latency, as retries do
                    response = lit.completion(
                        **route,
                        messages=messages,
                        num_retries=0,
                        timeout=self.gw.request_timeout_s,
                        drop_params=True,
                        **params,
                    )
                return response, attempt
            except Exception as e:
                if attempt > self.gw.max_retries or not _is_transient(e):
                    raise
                delay = min(self.gw.backoff_max_s, self.gw.backoff_base_s * 2 ** (attempt - 1))
                time.sleep(random.uniform(0, delay))

    def _local_route(self, model: str, messages: list, params: dict) -> tuple[dict, list, dict]:
        """Where a local model's call goes (its server, started on first use), with the prompt
        cut to fit its context and a bound on the reply."""
        with self._lock:
            server = self._local.get(model)
            if server is None:
                server = self._local[model] = LocalServer(model, self.gw.local_context, self.gw.local_threads,
                                                          self.ledger.path.parent / "local_model.log")
        server.ensure_started()
        n_ctx = server.n_ctx
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
        params = {k: v for k, v in params.items() if k not in ("max_completion_tokens", "tools", "tool_choice",
                                                                "_skip_mcp_handler")}
        params["max_tokens"] = min(int(max_tokens), n_ctx // 2)
        route = {"model": f"openai/{server.alias}", "api_base": server.api_base, "api_key": "local"}
        return route, fit_messages(messages, n_ctx, params["max_tokens"]), params

    def _cache_key(self, model: str, body: dict) -> str | None:
        mode = self.gw.cache
        if mode == "off" or (mode == "temperature0" and body.get("temperature") != 0):
            return None
        keyed = {k: v for k, v in body.items() if k not in _NOT_IN_CACHE_KEY}
        keyed["model"] = model
        return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()

    def _book(self, call: Call) -> None:
        self.ledger.record(call)
        with self._lock:
            s = self._spent
            s.calls += 1
            s.prompt_tokens += call.prompt_tokens
            s.completion_tokens += call.completion_tokens
            s.cost_usd += call.cost_usd
            s.cache_hits += int(call.cache_hit)
            s.errors += int(call.error is not None)

    @staticmethod
    def _reply(payload: dict, requested: str, cost: float, cache_hit: bool) -> Reply:
        payload = dict(payload, model=requested)
        headers = {"x-gateway-cost-usd": f"{cost:.8f}", "x-gateway-cache-hit": str(int(cache_hit))}
        return Reply(200, payload, headers)


@lru_cache(maxsize=None)
def _litellm_prices(model: str) -> bool:
    """Whether litellm's own table prices `model` (asked once, before we register anything)."""
    try:
        _litellm().get_model_info(model)
        return True
    except Exception:
        return False


def remove_dead_socket_dirs() -> None:
    """Remove socket folders of gateways that died without cleaning up (a SIGKILLed run):
    ours, and no one answers on their socket."""
    import socket

    for folder in Path(tempfile.gettempdir()).glob(f"{SOCKET_DIR_PREFIX}*"):
        try:
            info = folder.stat()
            # Not someone else's, and not one a gateway is creating right now.
            if info.st_uid != os.getuid() or time.time() - info.st_mtime < 60:
                continue
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(folder / "gateway.sock"))
                continue  # a live gateway
            finally:
                probe.close()
        except (ConnectionRefusedError, FileNotFoundError):
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def register_price(model: str, price: list[float] | None) -> None:
    """Give litellm a price for `model` when the config sets one or litellm has none.

    litellm prices every response itself (`_hidden_params["response_cost"]`); for a
    model missing from its table it first searches the whole table, on every call,
    and then gives up. A registered price (0 where unknown: tokens are still counted)
    makes that a dictionary lookup and lets a configured price take effect.
    """
    known = _litellm_prices(model)
    if price is None and known:
        return
    price = price or [0.0, 0.0]
    entry = {"input_cost_per_token": price[0] / 1e6, "output_cost_per_token": price[1] / 1e6,
             "litellm_provider": provider_of(model), "mode": "chat"}
    if not known:  # cached tokens cost 0 either way; saying so keeps litellm from warning about it
        entry.update(cache_creation_input_token_cost=0.0, cache_read_input_token_cost=0.0)
    _litellm().register_model({model: entry})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Every worker thread connects at once when a batch starts; the default backlog of 5
    # drops some of those connections and the client retries only after a second.
    request_queue_size = 128


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    gateway: Gateway
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the body waits ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):  # the ledger is the log; stderr stays for the user
        pass

    def _send(self, reply: Reply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            models = sorted(self.gateway._allowed)
            self._send(Reply(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]}, {}))
        elif self.path.rstrip("/") == "/health":
            self._send(Reply(200, {"status": "ok"}, {}))
        else:
            self._send(_error(404, f"no route {self.path}", "not_found"))

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return self._send(_error(404, f"no route {self.path}", "not_found"))
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except Exception:
            return self._send(_error(400, "request body is not a JSON object", "invalid_request_error"))
        auth = self.headers.get("Authorization", "")
        api_key = auth.removeprefix("Bearer ").strip()
        self._send(self.gateway.handle_chat(api_key, body))


def open_gateway(config: Config, run_dir: str | Path, run_id: str) -> Gateway:
    """A started gateway whose ledger lives in `run_dir/ledger.sqlite` (shared with a resumed run)."""
    return Gateway(config, Ledger(Path(run_dir) / "ledger.sqlite"), run_id).start()
