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

from inside.warm_up import warm_up
from services.config import Config, GatewayConfig
from services.errors import UserError
from services.ledger import REFUSED, Call, Ledger, Totals
from services.local_model import DEFAULT_MAX_TOKENS, LocalServer, fit_messages, is_local
from services.providers import _litellm, provider_of, redact
from services.rate_limit import CallLimits

SOCKET_DIR_PREFIX = "hyperagents-gw-"  # under the temp folder: a short path, as sun_path holds 108 bytes
# Parameters that do not change what the model answers, so do not split the cache.
_NOT_IN_CACHE_KEY = ("user",)


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


@dataclass(frozen=True)
class _Pricing:
    input_usd: float = 0.0  # per prompt token, the dearest tier (long prompts cost more on some models)
    output_usd: float = 0.0  # per output token, the dearest tier
    max_output: int | None = None  # most tokens the model writes in one reply, where litellm knows it


def _pricing_of(model: str) -> _Pricing:
    """A model's prices and output cap from litellm's table (which `register_price` fills); free where unknown."""
    try:
        info = _litellm().get_model_info(model)
    except Exception:
        return _Pricing()

    def dearest(*prefixes: str) -> float:
        return max((float(v) for k, v in info.items() if k.startswith(prefixes) and type(v) in (int, float)),
                   default=0.0)

    most = info.get("max_output_tokens")
    output = dearest("output_cost_per_token", "output_cost_per_reasoning_token")
    return _Pricing(dearest("input_cost_per_token"), output, most if type(most) is int and most > 0 else None)


def _exhausted(gw: GatewayConfig, spent: Totals) -> str | None:
    """Which budget `spent` has used up, in words; None while both have room."""
    if gw.budget_usd is not None and spent.cost_usd >= gw.budget_usd:
        return f"budget exhausted: spent ${spent.cost_usd:.4f} of ${gw.budget_usd:.4f}"
    if gw.budget_tokens is not None and spent.tokens >= gw.budget_tokens:
        return f"token budget exhausted: spent {spent.tokens} of {gw.budget_tokens} tokens"
    return None


# -- what a caller may send ------------------------------------------------------------------
# A caller holds only a session key, and litellm reads many request fields as routing,
# credentials, headers, callbacks or canned answers (api_base, api_key, extra_headers,
# mock_response, metadata, ...). So a request may carry only the OpenAI chat parameters of
# `_PARAMS`, each type-checked and capped; any other field is refused by name. Plain dict and
# type checks: they run on every call of the throughput bench.


class _Refusal(Exception):
    """A request answered with an error status before any provider call; booked as refused."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _invalid(name: str, why: str) -> _Refusal:
    """A 400 naming the field (names are the caller's: cut short)."""
    return _Refusal(400, f"field {name[:100]!r} {why}")


_KINDS = {str: "a string", dict: "an object", list: "a list", bool: "true or false"}


def _shaped(name: str, value, shape: dict, required: tuple = ()) -> dict:
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


def _number(low: float, high: float):
    """A check of a number from `low` to `high` (NaN and infinities fail it)."""
    def check(name: str, value, gw: GatewayConfig):
        if type(value) not in (int, float) or not low <= value <= high:
            raise _invalid(name, f"must be a number from {low} to {high}")
        return value
    return check


def _integer(low: int, high: int | str):
    """A check of an integer from `low` to `high`: a number, or the name of the gateway setting that caps it."""
    def check(name: str, value, gw: GatewayConfig):
        top = getattr(gw, high) if isinstance(high, str) else high
        if type(value) is not int or not low <= value <= top:
            setting = f" (gateway.{high})" if isinstance(high, str) else ""
            raise _invalid(name, f"must be an integer from {low} to {top}{setting}")
        return value
    return check


def _one_of(*choices: str):
    """A check of one of the strings `choices`."""
    def check(name: str, value, gw: GatewayConfig):
        if not isinstance(value, str) or value not in choices:
            raise _invalid(name, "must be one of " + ", ".join(map(repr, choices)))
        return value
    return check


def _boolean(name: str, value, gw: GatewayConfig):
    """A check of true or false."""
    if type(value) is not bool:
        raise _invalid(name, "must be true or false")
    return value


def _user(name: str, value, gw: GatewayConfig):
    """A check of the caller's end-user id: a short string."""
    if not isinstance(value, str) or len(value) > 256:
        raise _invalid(name, "must be a string of at most 256 characters")
    return value


def _stop(name: str, value, gw: GatewayConfig):
    """A check of stop sequences: a string or up to 4 of them, as OpenAI takes."""
    if isinstance(value, str) or (isinstance(value, list) and len(value) <= 4
                                  and all(isinstance(s, str) for s in value)):
        return value
    raise _invalid(name, "must be a string or a list of at most 4 strings")


_MAX_TOOLS = 128  # OpenAI's own limit
_TOOL = {"type": str, "function": dict}
_FUNCTION = {"name": str, "description": str, "parameters": dict, "strict": bool}


def _tools(name: str, value, gw: GatewayConfig):
    """A check of tools: plain functions with a JSON schema. Other kinds (MCP servers, web search,
    code interpreters) make a provider or litellm reach out by themselves."""
    if not isinstance(value, list) or len(value) > _MAX_TOOLS:
        raise _invalid(name, f"must be a list of at most {_MAX_TOOLS} tools")
    for i, tool in enumerate(value):
        where = f"{name}[{i}]"
        _shaped(where, tool, _TOOL, required=("type", "function"))
        if tool["type"] != "function":
            raise _invalid(f"{where}.type", "must be 'function'")
        _shaped(f"{where}.function", tool["function"], _FUNCTION, required=("name",))
    return value


def _tool_choice(name: str, value, gw: GatewayConfig):
    """A check of "none", "auto", "required" or {"type": "function", "function": {"name": ...}}."""
    if value in ("none", "auto", "required"):
        return value
    if isinstance(value, str):
        raise _invalid(name, "must be 'none', 'auto', 'required' or a function to call")
    _shaped(name, value, _TOOL, required=("type", "function"))
    if value["type"] != "function":
        raise _invalid(f"{name}.type", "must be 'function'")
    _shaped(f"{name}.function", value["function"], {"name": str}, required=("name",))
    return value


# "schema" on json_object: how agent/llm.py asks a local model's server for constrained decoding.
_FORMATS = {"text": {"type": str}, "json_object": {"type": str, "schema": dict},
            "json_schema": {"type": str, "json_schema": dict}}
_JSON_SCHEMA = {"name": str, "description": str, "schema": dict, "strict": bool}


def _response_format(name: str, value, gw: GatewayConfig):
    """A check of {"type": "text" | "json_object" (with an optional "schema") | "json_schema", ...}."""
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind not in _FORMATS:
        raise _invalid(name, "must be an object whose type is " + ", ".join(map(repr, _FORMATS)))
    _shaped(name, value, _FORMATS[kind], required=("json_schema",) if kind == "json_schema" else ())
    if kind == "json_schema":
        _shaped(f"{name}.json_schema", value["json_schema"], _JSON_SCHEMA, required=("name",))
    return value


_PARAMS = {
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
# Checked in `Gateway._admit`, never forwarded as they are: litellm's OpenAI-compatible clients
# send "stream": false by themselves.
_ADMITTED = ("model", "messages", "stream")

_ROLES = ("system", "user", "assistant", "tool", "developer")
_MESSAGE = {"role": str, "content": object, "name": str, "tool_calls": list, "tool_call_id": str}
_TEXT_PART = {"type": str, "text": str}
_TOOL_CALL = {"id": str, "type": str, "function": dict}
# Fields of a response's message (and its tool calls) that agents send back when they append
# `message.model_dump()` to their history: dropped, never forwarded, and not an error.
_ECHOED = frozenset(("provider_specific_fields", "refusal", "annotations", "audio", "function_call",
                     "reasoning_content", "thinking_blocks", "index"))
_CALLED = {"name": str, "arguments": str}


def _content(name: str, value) -> None:
    """A check of a message's content: a string, null, or text parts (no images or files: a provider fetches
    their URLs)."""
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list):
        raise _invalid(name, "must be a string, a list of text parts or null")
    for i, part in enumerate(value):
        _shaped(f"{name}[{i}]", part, _TEXT_PART, required=("type", "text"))
        if part["type"] != "text":
            raise _invalid(f"{name}[{i}].type", "must be 'text'")


def _without_echoes(value):
    """A message or tool call without the response-only fields of `_ECHOED`."""
    if isinstance(value, dict) and not _ECHOED.isdisjoint(value):
        return {k: v for k, v in value.items() if k not in _ECHOED}
    return value


def _messages(value: list) -> list:
    """The messages, checked: known roles, text content, and the assistant's tool calls."""
    if not value:
        raise _invalid("messages", "must not be empty")
    value = [_without_echoes(m) for m in value]
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        _shaped(where, message, _MESSAGE, required=("role",))
        if message.get("tool_calls"):  # a list: `_shaped` checked it
            message["tool_calls"] = [_without_echoes(call) for call in message["tool_calls"]]
        if message["role"] not in _ROLES:
            raise _invalid(f"{where}.role", "must be one of " + ", ".join(map(repr, _ROLES)))
        _content(f"{where}.content", message.get("content"))
        for j, call in enumerate(message.get("tool_calls") or ()):
            at = f"{where}.tool_calls[{j}]"
            _shaped(at, call, _TOOL_CALL, required=("id", "type", "function"))
            if call["type"] != "function":
                raise _invalid(f"{at}.type", "must be 'function'")
            _shaped(f"{at}.function", call["function"], _CALLED, required=("name", "arguments"))
    return value


def _checked(body: dict, gw: GatewayConfig) -> tuple[list, dict]:
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


def _canonical(model: str, messages: list, params: dict) -> str:
    """The request as one ASCII JSON text: its cache key is a hash of it, and its length bounds the prompt's
    tokens (a token is at least a byte of text; the JSON around each message outweighs the few tokens a
    provider's chat template adds)."""
    keyed = {k: v for k, v in params.items() if k not in _NOT_IN_CACHE_KEY}
    return json.dumps({**keyed, "model": model, "messages": messages}, sort_keys=True)


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
        self._pricing: dict[str, _Pricing] = {}  # allowed model -> what its worst case costs
        self._limits = CallLimits(self.gw.max_concurrent_calls, self.gw.requests_per_minute)
        self._warmed: set[str] = set()  # litellm providers whose first-call set-up is paid (inside/warm_up.py)
        self._lock = threading.Lock()
        self._spent = ledger.totals(run_id=run_id)
        self._held_usd = 0.0  # worst cases of the calls in flight, held against the budgets
        self._held_tokens = 0
        self._budget_refusal: str | None = None  # the first call the budget could not hold
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
        """The gateway's Unix socket, for sandboxes (see inside/relay.py)."""
        return self._socket_dir / "gateway.sock"

    # -- who may call what -----------------------------------------------------------------
    def allow_models(self, *models: str) -> None:
        """Add models (aliases or provider strings) that callers may request in this run."""
        resolved = {self.config.resolve_model(m) for m in models}
        providers = set()
        pricing = {}
        for model in resolved - self._allowed:
            if is_local(model):  # free, not a name litellm knows, and reached as an OpenAI server
                providers.add("openai")
                pricing[model] = _Pricing(max_output=DEFAULT_MAX_TOKENS)
                continue
            register_price(model, self.gw.prices.get(model))
            pricing[model] = _pricing_of(model)
            with contextlib.suppress(UserError):
                providers.add(provider_of(model))
        with self._lock:
            self._pricing.update(pricing)
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
        """Why no new call may start (a budget is spent, or it already refused a call whose worst case it
        could not hold), or None while the budget allows one."""
        with self._lock:
            return _exhausted(self.gw, self._spent) or self._budget_refusal

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
        """Answer one chat request: refuse it, replay it from the cache, or forward it; each is booked."""
        try:
            session, model, messages, params = self._admit(api_key, body)
            canonical = _canonical(model, messages, params)
            key = self._cache_key(canonical, params)
            hit = key and self.ledger.cache_get(key)
            if hit:
                self._book(Call(session.run_id, session.node, session.role, model, cache_hit=True))
                return self._reply(json.loads(hit[0]), body["model"], cost=0.0, cache_hit=True)
            params = self._with_output_cap(model, params)
            worst = self._worst_case(model, len(canonical), params)
            self._reserve(*worst)
        except _Refusal as r:
            return self.refuse(api_key, r.status, r.message, r.kind, body.get("model"))
        try:
            return self._call(session, model, messages, params, key, body["model"])
        finally:
            self._release(*worst)

    def refuse(self, api_key: str, status: int, message: str, kind: str, requested: object = None) -> Reply:
        """Book a request refused before any provider call to its session (node and role "unknown"
        without one), and the error that answers it."""
        session = self._sessions.get(api_key)
        node, role = (session.node, session.role) if session else ("unknown", "unknown")
        model = self.config.resolve_model(requested)[:200] if isinstance(requested, str) else ""
        self._book(Call(self.run_id, node, role, model, error=f"{REFUSED} {status} {message}"[:2000]))
        return _error(status, message, kind)

    def _admit(self, api_key: str, body: dict) -> tuple[Session, str, list, dict]:
        """The request's session, model, messages and checked parameters; a _Refusal when it may not go on."""
        session = self._sessions.get(api_key)
        if session is None:
            raise _Refusal(401, "unknown gateway key", "authentication_error")
        requested = body.get("model")
        if not isinstance(requested, str) or not isinstance(body.get("messages"), list):
            raise _Refusal(400, "a chat request needs a model string and a messages list")
        model = self.config.resolve_model(requested)
        if model not in self._allowed:
            allowed = ", ".join(sorted(self._allowed)) or "none"
            raise _Refusal(403, f"model {requested[:200]!r} is not allowed in this run (allowed: {allowed})",
                           "permission_error")
        if body.get("stream"):
            raise _Refusal(400, "the gateway does not stream; call without stream=True")
        messages, params = _checked(body, self.gw)
        with self._lock:
            session.calls += 1
            over = session.max_calls is not None and session.calls > session.max_calls
        if over:
            raise _Refusal(429, f"this session's limit of {session.max_calls} model calls is reached",
                           "call_limit_reached")
        return session, model, messages, params

    def _with_output_cap(self, model: str, params: dict) -> dict:
        """`params` with an explicit max_tokens when the caller set none: the provider then bounds the
        reply, so the call's reserved worst case holds."""
        if "max_tokens" in params or "max_completion_tokens" in params:
            return params
        most = self._pricing[model].max_output or self.gw.max_output_tokens
        return {**params, "max_tokens": min(self.gw.max_output_tokens, most)}

    def _worst_case(self, model: str, prompt_bytes: int, params: dict) -> tuple[float, int]:
        """The most a call can cost, in USD and in tokens: a token per prompt byte, and every output
        token it may ask for in each of its `n` choices."""
        pricing = self._pricing[model]
        output = max(params.get("max_tokens", 0), params.get("max_completion_tokens", 0)) * params.get("n", 1)
        return prompt_bytes * pricing.input_usd + output * pricing.output_usd, prompt_bytes + output

    def _reserve(self, cost: float, tokens: int) -> None:
        """Hold a call's worst case against the budgets until it ends; a 402 when that, on top of what is
        spent and held by calls in flight, could pass a budget."""
        gw = self.gw
        with self._lock:
            s = self._spent
            problem = _exhausted(gw, s)
            if problem is None and gw.budget_usd is not None and s.cost_usd + self._held_usd + cost > gw.budget_usd:
                problem = (f"budget exhausted: ${s.cost_usd:.4f} spent and ${self._held_usd:.4f} held by calls in "
                           f"flight leave less of gateway.budget_usd ${gw.budget_usd:.4f} than this call may cost "
                           f"(${cost:.4f}; a smaller max_tokens lowers that)")
            if (problem is None and gw.budget_tokens is not None
                    and s.tokens + self._held_tokens + tokens > gw.budget_tokens):
                problem = (f"token budget exhausted: {s.tokens} spent and {self._held_tokens} held by calls in "
                           f"flight leave less of gateway.budget_tokens {gw.budget_tokens} than this call may use "
                           f"({tokens}; a smaller max_tokens lowers that)")
            if problem is None:
                self._held_usd += cost
                self._held_tokens += tokens
                return
            self._budget_refusal = self._budget_refusal or problem
        raise _Refusal(402, problem, "budget_exceeded")

    def _release(self, cost: float, tokens: int) -> None:
        """Give back a finished call's hold; its real cost is booked by then."""
        with self._lock:
            self._held_usd -= cost
            self._held_tokens -= tokens

    def _call(self, session: Session, model: str, messages: list, params: dict, key: str | None,
              requested: str) -> Reply:
        """Forward a checked request to its provider, book it and cache the answer."""
        started = time.monotonic()
        call = Call(session.run_id, session.node, session.role, model)
        try:
            response, call.attempts = self._forward(model, messages, params)
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
        max_tokens = params.get("max_tokens") or params["max_completion_tokens"]  # handle_chat sets one
        params = {k: v for k, v in params.items() if k not in ("max_completion_tokens", "tools", "tool_choice",
                                                                "_skip_mcp_handler")}
        params["max_tokens"] = min(int(max_tokens), n_ctx // 2)
        route = {"model": f"openai/{server.alias}", "api_base": server.api_base, "api_key": "local"}
        return route, fit_messages(messages, n_ctx, params["max_tokens"]), params

    def _cache_key(self, canonical: str, params: dict) -> str | None:
        """The key a request's answer is cached under, or None when the cache mode does not replay it."""
        mode = self.gw.cache
        if mode == "off" or (mode == "temperature0" and params.get("temperature") != 0):
            return None
        return hashlib.sha256(canonical.encode()).hexdigest()

    def _book(self, call: Call) -> None:
        """Write a call to the ledger and add it to the run's totals (counted as the ledger's `totals` counts)."""
        self.ledger.record(call)
        refused = call.error is not None and call.error.startswith(REFUSED)
        with self._lock:
            s = self._spent
            s.calls += not refused
            s.refused += refused
            s.prompt_tokens += call.prompt_tokens
            s.completion_tokens += call.completion_tokens
            s.cost_usd += call.cost_usd
            s.cache_hits += int(call.cache_hit)
            s.errors += call.error is not None and not refused

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
        """A chat request; its body is read only when its declared size is within gateway.max_request_mb."""
        api_key = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        length = self.headers.get("Content-Length", "").strip()
        limit = self.gateway.gw.max_request_mb * 2**20
        if not (length.isascii() and length.isdigit()):
            return self._refuse_unread(api_key, 400, "a request needs a Content-Length header with its size in bytes",
                                       "invalid_request_error")
        if int(length) > limit:
            return self._refuse_unread(api_key, 413, f"request body of {length} bytes is over gateway.max_request_mb "
                                       f"({self.gateway.gw.max_request_mb} MB)", "request_too_large")
        raw = self.rfile.read(int(length))
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return self._send(_error(404, f"no route {self.path}", "not_found"))
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except Exception:
            return self._send(self.gateway.refuse(api_key, 400, "request body is not a JSON object",
                                                  "invalid_request_error"))
        self._send(self.gateway.handle_chat(api_key, body))

    def _refuse_unread(self, api_key: str, status: int, message: str, kind: str) -> None:
        """Refuse a request whose body stays unread: the connection closes after the answer, since
        the unread bytes would otherwise be taken for the next request."""
        reply = self.gateway.refuse(api_key, status, message, kind)
        reply.headers["Connection"] = "close"
        self._send(reply)


def open_gateway(config: Config, run_dir: str | Path, run_id: str) -> Gateway:
    """A started gateway whose ledger lives in `run_dir/ledger.sqlite` (shared with a resumed run)."""
    return Gateway(config, Ledger(Path(run_dir) / "ledger.sqlite"), run_id).start()
