"""The Gateway: the run's collaborators for model calls, and each request's way through them.

A request of any inbound protocol (inbound/) is admitted (admission.py: a live session, one of its
role's models, allowlisted parameters, calls left), replayed from the response cache (replay.py), or
held against the budget (budget.py) and forwarded (forwarding.py: routed to the local model or the
provider, marked for the provider's prompt cache once its replay key is taken, retried); each is
booked to the ledger. Each session counts its calls that failed at the provider, so the harness knows
which rows met an outage; the breaker (breaker.py) stops every call once a provider is down, and this
machine's failures (machine.py) the same way. The provider itself (litellm) is services/provider/'s.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from services.config import Config
from services.errors import MachineDown, ProviderDown
from services.gateway.admission import Admission, Admitted
from services.gateway.breaker import Breaker, Check
from services.gateway.budget import Budget, with_output_cap, worst_case
from services.gateway.failures import PROVIDER_DOWN, preflight
from services.gateway.forwarding import Forwarding
from services.gateway.inbound import CHAT, PROTOCOLS, Inbound, Reply
from services.gateway.machine import LedgerWrites, MachineFailures
from services.gateway.models import RunModels
from services.gateway.params import Refusal, canonical
from services.gateway.refusals import Refusals
from services.gateway.replay import Replays
from services.gateway.routing import Routes
from services.gateway.server import Listeners
from services.gateway.sessions import Session
from services.gateway.sessions import redact as redact_keys
from services.ledger import Call, Ledger, Totals
from services.provider import LITELLM, Provider

if TYPE_CHECKING:
    from services.sandbox.base import Sandbox


class Gateway:
    def __init__(self, config: Config, ledger: Ledger, run_id: str, provider_health: Check | None = None,
                 provider: Provider = LITELLM) -> None:
        """`provider_health(model)` says why a model's server is dead (None while it may answer): a
        failure of such a model trips the breaker at once. By default, a local model's server that
        ended by itself is dead (services/local_model.py). `provider`: how calls reach providers."""
        self.config = config
        self.gw = config.gateway
        self.ledger = ledger
        self.run_id = run_id
        self.provider = provider
        self._machine = MachineFailures(ledger.path.parent)  # this machine's failures: they stop every call
        self._writes = LedgerWrites(ledger, self._machine)
        self._budget = Budget(self.gw, ledger.totals(run_id=run_id))
        self._refusals = Refusals(self._writes, run_id, self._budget)
        self._replays = Replays(self.gw, self._writes)
        self.models = RunModels(config, provider)
        self.routes = Routes(self.gw, ledger.path.parent)
        self.forwarding = Forwarding(self.gw, provider, self.routes, run_id, self._book)
        self._breaker = Breaker(self.gw.breaker_failures, self.forwarding.probe, provider_health or self.routes.health)
        self.admission = Admission(config, run_id, self.models, lambda: self._machine.reason or self._breaker.reason)
        self._listeners: Listeners | None = None

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
            self.routes.stop()
            self.models.stop()

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
        self.models.allow(*models)

    def allowed_models(self) -> list[str]:
        return self.models.allowed()

    def models_for(self, api_key: str) -> list[str]:
        """The models the live session of `api_key` may call (GET /v1/models); a Refusal for any other key,
        so a sandbox learns nothing of the run's other roles."""
        return sorted(self.admission.sessions.live(api_key).models)

    def new_session(self, node: str, role: str, models: list[str], max_calls: int | None = None,
                    sandbox: Sandbox | None = None) -> str:
        """A key that books calls to (run, node, role), may call only `models` (aliases or provider
        strings: the role's), and answers at most `max_calls` requests; with `sandbox`, only while that
        sandbox is open (see sessions.py). Hand it to the caller as its API key."""
        return self.admission.new_session(node, role, models, max_calls, sandbox)

    def revoke(self, key: str) -> None:
        """Refuse every later request with `key` (401); its counts stay readable."""
        self.admission.sessions.revoke(key)

    @staticmethod
    def redact(text: str) -> str:
        """`text` with every gateway key in it (any gateway's) replaced: for text a later sandbox reads."""
        return redact_keys(text)

    def session_counts(self, key: str) -> Session | None:
        """A copy of the session of `key` with its counts (None for a key this gateway never made)."""
        return self.admission.counts(key)

    def provider_failures(self, key: str) -> int:
        """How many calls of the session of `key` failed at the provider so far (counted before the
        caller hears of the failure, so a reply that came after one is known to have met it)."""
        return self.admission.provider_failures(key)

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
        preflight(self.config, self.provider, models, self.run_id, self._book)

    # -- one request -----------------------------------------------------------------------
    def handle_chat(self, api_key: str, body: dict) -> Reply:
        """Answer one chat-completions request (see `handle`)."""
        return self.handle(CHAT.name, api_key, body)

    def handle(self, protocol: str, api_key: str, body: dict) -> Reply:
        """Answer one request of the inbound protocol `protocol`: refuse, replay or forward it, booked; one
        this machine fails (machine.py) is answered and counted as a provider's outage."""
        inbound = PROTOCOLS[protocol]
        try:
            return self._handle(inbound, api_key, body)
        except MachineDown as down:  # from now on every call is refused, and check_breaker raises it
            self._machine.failed(down)
            self.admission.failed(self.admission.sessions.get(api_key))
            return inbound.error(503, f"the gateway calls no provider any more: {down.reason}", PROVIDER_DOWN)

    def _handle(self, inbound: Inbound, api_key: str, body: dict) -> Reply:
        try:
            if inbound.counts:
                return _count(self.admission, inbound, api_key, body)
            request = self.admission.admit(api_key, body, inbound)
            session, model, params = request.session, request.model, request.params
            canon = canonical(model, request.messages, params)
            key = self._replays.key(canon, params, session)
            hit = self._replays.get(key)
            if hit is not None:
                self.admission.answered(session)
                self._book(Call(session.run_id, session.node, session.role, model, cache_hit=True))
                return _reply(inbound, hit, request.body, cost=0.0)
            params = with_output_cap(params, self.models.pricing(model), self.gw)
            worst = worst_case(self.models.pricing(model), len(canon), params)
            self._budget.reserve(*worst)
        except Refusal as r:
            return self.refuse(api_key, r.status, r.message, r.kind, inbound.name)
        try:
            return self._call(inbound, request._replace(params=params), key)
        finally:
            self._budget.release(*worst)

    def refuse(self, api_key: str, status: int, message: str, kind: str, protocol: str = CHAT.name) -> Reply:
        """Count a request refused before any provider call to its session's node and role ("unknown"
        without one), by reason (refusals.py), and the error that answers it; one past the refusals' rate
        closes its connection."""
        session = self.admission.sessions.get(api_key)
        node, role = (session.node, session.role) if session else ("unknown", "unknown")
        self.admission.refused(session, kind)
        reply = PROTOCOLS[protocol].error(status, message, kind)
        with contextlib.suppress(MachineDown):  # kept by self._machine: the run stops; the refusal is answered
            if self._refusals.count(node, role, f"{status} {kind}", message):
                reply.headers["Connection"] = "close"
        return reply

    def _call(self, inbound: Inbound, request: Admitted, key: str | None) -> Reply:
        """Forward an admitted request to its provider, book it and cache the answer."""
        session, model = request.session, request.model
        sent = self.forwarding.send(session, model, request.messages, request.params, self.models.pricing(model))
        if sent.failure is not None:
            if sent.failure.providers_fault:  # before the caller hears of it: see provider_failures
                self.admission.failed(session, model)
            self._book(sent.call)
            if sent.failure.providers_fault:
                self._breaker.failed(model, sent.call.error or "")
            return inbound.error(sent.failure.status, f"provider call for {model} failed: {sent.call.error}",
                                 "provider_error")
        assert sent.payload is not None
        self._breaker.answered(model)
        self.admission.answered(session)
        self._book(sent.call)
        self._replays.put(key, sent.payload, sent.call.cost_usd)
        return _reply(inbound, sent.payload, request.body, cost=sent.call.cost_usd)

    def _book(self, call: Call) -> None:
        """Write a call to the ledger and add it to the run's totals; MachineDown when the disk cannot."""
        self._writes.record(call)
        self._budget.add(call)


def _count(admission: Admission, inbound: Inbound, api_key: str, body: dict) -> Reply:
    """How many tokens a request's prompt holds, estimated here (a token per 4 bytes of its chat form) for a
    session that could send it: no provider call, nothing booked."""
    request = admission.admit(api_key, body, inbound, call=False)
    size = len(canonical(request.model, request.messages, request.params))
    return Reply(200, inbound.reply({"usage": {"prompt_tokens": -(-size // 4)}}, body), {})


def _reply(inbound: Inbound, payload: dict, body: dict, cost: float) -> Reply:
    """The reply a caller gets: whether it came from the cache is the ledger's to know (a cached
    reply costs 0, which tells a caller only of its own node and role's earlier calls, the
    cache's scope)."""
    return Reply(200, inbound.reply(payload, body), {"x-gateway-cost-usd": f"{cost:.8f}"})


def open_gateway(config: Config, run_dir: str | Path, run_id: str) -> Gateway:
    """A started gateway whose ledger lives in `run_dir/ledger.sqlite` (shared with a resumed run)."""
    return Gateway(config, Ledger(Path(run_dir) / "ledger.sqlite"), run_id).start()
