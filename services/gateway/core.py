"""The Gateway: the run's model allowlist, and each request's way through it.

A request is admitted (a live session, one of its role's models, allowlisted parameters; see
sessions.py), replayed from the cache, or held against the budget, marked for the provider's
prompt cache once its replay key is taken (caching.py) and forwarded with litellm, with retries
of transient errors; each is booked to the ledger (usage.py). Each session counts its calls that
failed at the provider, so the harness knows which rows met an outage; the breaker (breaker.py)
stops every call once a provider is down, and this machine's failures (machine.py) the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from inside.warm_up import warm_up
from services.config import Config
from services.errors import MachineDown, ProviderDown, UserError
from services.gateway.breaker import Breaker, Check
from services.gateway.budget import Budget, with_output_cap, worst_case
from services.gateway.caching import REPLAYS, forwarded
from services.gateway.failures import PROBE, PROVIDER_DOWN, is_provider_failure, is_transient, preflight
from services.gateway.machine import LedgerWrites, MachineFailures
from services.gateway.params import Refusal, canonical, checked
from services.gateway.pricing import Pricing, pricing_of, register_price
from services.gateway.refusals import Refusals
from services.gateway.server import Listeners, Reply, error_reply
from services.gateway.sessions import Session, Sessions
from services.gateway.sessions import redact as redact_keys
from services.gateway.usage import account
from services.ledger import Call, Ledger, Totals
from services.local_model import LocalServer, fit_messages, is_local
from services.providers import _litellm, provider_of, redact
from services.rate_limit import CallLimits

if TYPE_CHECKING:
    from services.sandbox.base import Sandbox

WARM_UP_JOIN_S = 60.0  # a warm-up is a few stub calls; stop waits this long for it at most


class Gateway:
    def __init__(self, config: Config, ledger: Ledger, run_id: str, provider_health: Check | None = None) -> None:
        """`provider_health(model)` says why a model's server is dead (None while it may answer): a
        failure of such a model trips the breaker at once. By default, a local model's server that
        ended by itself is dead (services/local_model.py)."""
        self.config = config
        self.gw = config.gateway
        self.ledger = ledger
        self.run_id = run_id
        self._sessions = Sessions(run_id)
        self._allowed: set[str] = set()
        self._pricing: dict[str, Pricing] = {}  # allowed model -> what its worst case costs
        self._limits = CallLimits(self.gw.max_concurrent_calls, self.gw.requests_per_minute)
        self._warmed: set[str] = set()  # litellm providers whose first-call set-up is paid (inside/warm_up.py)
        self._warm_ups: list[threading.Thread] = []  # joined by stop (see there)
        self._lock = threading.Lock()
        self._budget = Budget(self.gw, ledger.totals(run_id=run_id))
        self._machine = MachineFailures(ledger.path.parent)  # this machine's failures: they stop every call
        self._writes = LedgerWrites(ledger, self._machine)
        self._refusals = Refusals(self._writes, run_id, self._budget)
        self._listeners: Listeners | None = None
        self._local: dict[str, LocalServer] = {}  # local model -> its server, started on first use
        self._breaker = Breaker(self.gw.breaker_failures, self._probe, provider_health or self._local_health)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Gateway:
        self._listeners = Listeners(self, self.gw.host, self.gw.port, self.ledger.path.parent / "gateway.log")
        return self

    def stop(self) -> None:
        if self._listeners:
            self._listeners.close()
            self._listeners = None
        try:
            self._refusals.flush()
        finally:
            for server in self._local.values():
                server.stop()
            # A warm-up still importing litellm's modules when the interpreter exits would hold their
            # import locks forever, and litellm's finalizers, importing at exit, would wait on them: a
            # run that stops at once (a refused model) hung at exit about one time in six on 2 cores.
            for thread in self._warm_ups:
                thread.join(WARM_UP_JOIN_S)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._listeners, "the gateway is not started"
        return self._listeners.url

    @property
    def unix_socket(self) -> Path:
        """The gateway's Unix socket, for sandboxes (see inside/relay.py)."""
        assert self._listeners, "the gateway is not started"
        return self._listeners.unix_socket

    # -- who may call what -----------------------------------------------------------------
    def allow_models(self, *models: str) -> None:
        """Add models (aliases or provider strings) that callers may request in this run."""
        resolved = {self.config.resolve_model(m) for m in models}
        providers: set[str] = set()
        pricing: dict[str, Pricing] = {}
        for model in resolved - self._allowed:
            if is_local(model):  # not a name litellm knows, and reached as an OpenAI server
                providers.add("openai")
            else:
                register_price(model, self.gw.prices.get(model))
                with contextlib.suppress(UserError):
                    providers.add(provider_of(model))
            pricing[model] = pricing_of(model, self.gw.prices)
        with self._lock:
            self._pricing.update(pricing)
            self._allowed.update(resolved)
            providers -= self._warmed
            self._warmed |= providers
        if providers:
            thread = threading.Thread(target=warm_up, args=(_litellm(), sorted(providers)), name="gateway-warm-up",
                                      daemon=True)
            thread.start()
            self._warm_ups.append(thread)

    def allowed_models(self) -> list[str]:
        with self._lock:
            return sorted(self._allowed)

    def models_for(self, api_key: str) -> list[str]:
        """The models the live session of `api_key` may call (GET /v1/models); a Refusal for any other key,
        so a sandbox learns nothing of the run's other roles."""
        return sorted(self._sessions.live(api_key).models)

    def new_session(self, node: str, role: str, models: list[str], max_calls: int | None = None,
                    sandbox: Sandbox | None = None) -> str:
        """A key that books calls to (run, node, role), may call only `models` (aliases or provider
        strings: the role's), and answers at most `max_calls` requests; with `sandbox`, only while that
        sandbox is open (see sessions.py). Hand it to the caller as its API key."""
        resolved = frozenset(self.config.resolve_model(m) for m in models)
        return self._sessions.new(node, role, resolved, max_calls, sandbox)

    def revoke(self, key: str) -> None:
        """Refuse every later request with `key` (401); its counts stay readable."""
        self._sessions.revoke(key)

    @staticmethod
    def redact(text: str) -> str:
        """`text` with every gateway key in it (of this gateway or any other) replaced: for text a
        later sandbox reads."""
        return redact_keys(text)

    def session_counts(self, key: str) -> Session | None:
        """A copy of the session of `key` with its counts (None for a key this gateway never made)."""
        session = self._sessions.get(key)
        with self._lock:
            return dataclasses.replace(session) if session else None

    def provider_failures(self, key: str) -> int:
        """How many calls of the session of `key` failed at the provider so far (counted before the
        caller hears of the failure, so a reply that came after one is known to have met it)."""
        session = self._sessions.get(key)
        with self._lock:
            return session.provider_failures if session else 0

    def check_breaker(self) -> None:
        """MachineDown once this machine failed (machine.py; a local model's server died: breaker.py),
        ProviderDown once the breaker tripped; nothing before. One stat: the harness asks for each row."""
        self._machine.check(self._listeners.reach.lost() if self._listeners is not None else None)
        if self._breaker.reason:
            raise (MachineDown if self._breaker.dead else ProviderDown)(self._breaker.reason, self.ledger.path.parent)

    def confirm_outage(self, key: str | None = None, during: str = "on every try") -> None:
        """Calls failed at the provider where they must not (`during` a harness row's every try, a
        meta agent's run, a scorer's own call): probe the model of the last such failure of `key`'s
        session (without a key, every model whose last call failed), and raise ProviderDown when a
        probe fails too."""
        session = self.session_counts(key) if key else None
        if session and session.failed_model:
            self._breaker.confirm(session.failed_model, f"failed {during} ({session.node}/{session.role})")
        elif key is None:
            self._breaker.confirm_failing()
        self.check_breaker()

    def spent(self) -> Totals:
        return self._budget.spent()

    def budget_left_message(self) -> str | None:
        """Why no new call may start (a budget is spent, or what is left cannot hold an ordinary call),
        or None while the budget allows one."""
        return self._budget.left_message()

    def preflight(self, models: list[str]) -> None:
        """One tiny call to each provider model (failures.py), so a wrong key, an unknown model name or an
        unreachable provider stops the run at once with one line; booked as node and role "preflight"."""
        preflight(self.config, models, self.run_id, self._book)

    # -- one request -----------------------------------------------------------------------
    def handle_chat(self, api_key: str, body: dict) -> Reply:
        """Answer one chat request: refuse, replay or forward it, booked; one this machine fails (machine.py)
        is answered and counted as a provider's outage."""
        try:
            return self._handle_chat(api_key, body)
        except MachineDown as down:  # from now on every call is refused, and check_breaker raises it
            self._machine.failed(down)
            if session := self._sessions.get(api_key):
                with self._lock:
                    session.provider_failures += 1
            return error_reply(503, f"the gateway calls no provider any more: {down.reason}", PROVIDER_DOWN)

    def _handle_chat(self, api_key: str, body: dict) -> Reply:
        try:
            session, model, messages, params = self._admit(api_key, body)
            request = canonical(model, messages, params)
            key = self._cache_key(request, params, session)
            hit = key and self.ledger.cache_get(key)
            if hit:
                with self._lock:
                    session.answered += 1
                self._book(Call(session.run_id, session.node, session.role, model, cache_hit=True))
                return self._reply(json.loads(hit[0]), body["model"], cost=0.0)
            params = with_output_cap(params, self._pricing[model], self.gw)
            worst = worst_case(self._pricing[model], len(request), params)
            self._budget.reserve(*worst)
        except Refusal as r:
            return self.refuse(api_key, r.status, r.message, r.kind)
        try:
            return self._call(session, model, messages, params, key, body["model"])
        finally:
            self._budget.release(*worst)

    def refuse(self, api_key: str, status: int, message: str, kind: str) -> Reply:
        """Count a request refused before any provider call to its session's node and role ("unknown"
        without one), by reason (refusals.py), and the error that answers it; one past the refusals' rate
        closes its connection."""
        session = self._sessions.get(api_key)
        node, role = (session.node, session.role) if session else ("unknown", "unknown")
        reply = error_reply(status, message, kind)
        with contextlib.suppress(MachineDown):  # kept by self._machine: the run stops; the refusal is answered
            if self._refusals.count(node, role, f"{status} {kind}", message):
                reply.headers["Connection"] = "close"
        return reply

    def _admit(self, api_key: str, body: dict) -> tuple[Session, str, list, dict]:
        """The request's session, model, messages and checked parameters; a Refusal when it may not go on."""
        session = self._sessions.live(api_key)
        stopped = self._machine.reason or self._breaker.reason
        if stopped:
            with self._lock:
                session.provider_failures += 1
            raise Refusal(503, f"the gateway calls no provider any more: {stopped}", PROVIDER_DOWN)
        requested = body.get("model")
        if not isinstance(requested, str) or not isinstance(body.get("messages"), list):
            raise Refusal(400, "a chat request needs a model string and a messages list")
        model = self.config.resolve_model(requested)
        if model not in session.models:
            raise self._sessions.refuse_model(session, requested)
        if model not in self._allowed:
            allowed = ", ".join(sorted(self._allowed)) or "none"
            raise Refusal(403, f"model {requested[:200]!r} is not allowed in this run (allowed: {allowed})",
                          "permission_error")
        if body.get("stream"):
            raise Refusal(400, "the gateway does not stream; call without stream=True")
        messages, params = checked(body, self.gw)
        with self._lock:
            session.calls += 1
            over = session.max_calls is not None and session.calls > session.max_calls
        if over:
            raise Refusal(429, f"this session's limit of {session.max_calls} model calls is reached",
                          "call_limit_reached")
        return session, model, messages, params

    def _call(self, session: Session, model: str, messages: list, params: dict, key: str | None,
              requested: str) -> Reply:
        """Forward a checked request to its provider, book it and cache the answer."""
        started = time.monotonic()
        call = Call(session.run_id, session.node, session.role, model)
        messages, params = forwarded(model, session, messages, params, self.gw.prompt_caching)
        try:
            response, call.attempts = self._forward(model, messages, params)
        except Exception as e:
            call.latency_s = time.monotonic() - started
            call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            failed = is_provider_failure(e)
            if failed:  # before the caller hears of it: see provider_failures
                with self._lock:
                    session.provider_failures += 1
                    session.failed_model = model
            self._book(call)
            if failed:
                self._breaker.failed(model, call.error)
            status = getattr(e, "status_code", None)
            status = status if isinstance(status, int) and 400 <= status < 600 else 502
            return error_reply(status, f"provider call for {model} failed: {call.error}", "provider_error")
        call.latency_s = time.monotonic() - started
        payload = account(call, response, self._pricing[model])
        self._breaker.answered(model)
        with self._lock:
            session.answered += 1
        self._book(call)
        if key:
            self._writes.cache_put(key, json.dumps(payload), call.cost_usd)
        return self._reply(payload, requested, cost=call.cost_usd)

    def _probe(self, model: str) -> str | None:
        """The breaker's own small call to `model`: None when the provider answered (a refusal of the
        request is an answer too), else its error. Booked as node and role "probe"."""
        started = time.monotonic()
        call = Call(self.run_id, "probe", "probe", model)
        try:
            response, call.attempts = self._forward(model, PROBE, {"max_tokens": 16})
            account(call, response)
        except Exception as e:
            call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            return call.error if is_provider_failure(e) else None
        finally:
            call.latency_s = time.monotonic() - started
            self._book(call)
        return None

    def _local_health(self, model: str) -> str | None:
        with self._lock:
            server = self._local.get(model)
        return server.dead_reason() if server is not None else None

    def _forward(self, model: str, messages: list, params: dict) -> tuple[object, int]:
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
                    response = lit.completion(**route, messages=messages, num_retries=0,
                                              timeout=self.gw.request_timeout_s, drop_params=True, **params)
                return response, attempt
            except Exception as e:
                if attempt > self.gw.max_retries or not is_transient(e):
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
        route = {"model": f"openai/{server.alias}", "api_base": server.api_base, "api_key": server.api_key}
        return route, fit_messages(messages, n_ctx, params["max_tokens"]), params

    def _cache_key(self, request: str, params: dict, session: Session) -> str | None:
        """The key a request's answer is cached under, or None when the cache mode does not replay it.

        Scoped to the node and role that asked: a generation redone after a kill (or a resumed
        evaluation) replays its own calls, but one generation never gets another's answer. Unscoped,
        every meta agent's first call (the same prompt each generation at temperature 0) would be
        the first one's reply again, and the search would repeat itself instead of sampling."""
        if not REPLAYS[self.gw.cache](params):
            return None
        return hashlib.sha256(f"{session.node}\0{session.role}\0{request}".encode()).hexdigest()

    def _book(self, call: Call) -> None:
        """Write a call to the ledger and add it to the run's totals; MachineDown when the disk cannot."""
        self._writes.record(call)
        self._budget.add(call)

    @staticmethod
    def _reply(payload: dict, requested: str, cost: float) -> Reply:
        """The reply a caller gets: whether it came from the cache is the ledger's to know (a cached
        reply costs 0, which tells a caller only of its own node and role's earlier calls, the
        cache's scope)."""
        return Reply(200, dict(payload, model=requested), {"x-gateway-cost-usd": f"{cost:.8f}"})

def open_gateway(config: Config, run_dir: str | Path, run_id: str) -> Gateway:
    """A started gateway whose ledger lives in `run_dir/ledger.sqlite` (shared with a resumed run)."""
    return Gateway(config, Ledger(Path(run_dir) / "ledger.sqlite"), run_id).start()
