"""Who may call what: the sessions, the run's allowlist of models, each session's cap on calls, and the stop
that a tripped breaker or this machine's failure puts on every call.

A request is admitted when its key names a live session (sessions.py), no stop is on, it asks for one of
its role's models that the run allows, its fields pass the allowlist (params.py, read by its inbound
protocol: inbound/) and its session has calls left. Each check refuses with its own status, in that order.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from services.config import Config
from services.gateway.budget import BUDGET_EXCEEDED
from services.gateway.failures import PROVIDER_DOWN
from services.gateway.inbound import Inbound
from services.gateway.models import RunModels
from services.gateway.params import Refusal
from services.gateway.sessions import Session, Sessions

if TYPE_CHECKING:
    from services.sandbox.base import Sandbox


class Admitted(NamedTuple):
    session: Session
    requested: str  # the model as the caller named it (its reply names it so)
    model: str  # as provider/name
    messages: list
    params: dict
    body: dict  # the request as the caller sent it, which its answer is written for (inbound/)


class Admission:
    def __init__(self, config: Config, run_id: str, models: RunModels, stopped: Callable[[], str | None]) -> None:
        self.config = config
        self.models = models
        self._stopped = stopped  # why every call is refused now (the breaker, this machine), or None
        self.sessions = Sessions(run_id)
        self._lock = threading.Lock()  # the sessions' counts

    def new_session(self, node: str, role: str, models: list[str], max_calls: int | None = None,
                    sandbox: Sandbox | None = None) -> str:
        resolved = frozenset(self.config.resolve_model(m) for m in models)
        return self.sessions.new(node, role, resolved, max_calls, sandbox)

    def admit(self, api_key: str, body: dict, inbound: Inbound, call: bool = True) -> Admitted:
        """The request's session, model, messages and checked parameters; a Refusal when it may not go on.
        `call` False: a question the gateway answers itself (count_tokens), which spends none of the cap."""
        session = self.sessions.live(api_key)
        stopped = self._stopped()
        if stopped:
            self.failed(session)
            raise Refusal(503, f"the gateway calls no provider any more: {stopped}", PROVIDER_DOWN)
        requested = inbound.model(body)
        model = self.config.resolve_model(requested)
        if model not in session.models:
            raise self.sessions.refuse_model(session, requested)
        if model not in self.models:
            allowed = ", ".join(self.models.allowed()) or "none"
            raise Refusal(403, f"model {requested[:200]!r} is not allowed in this run (allowed: {allowed})",
                          "permission_error")
        messages, params = inbound.request(body, self.config.gateway)
        if not call:
            return Admitted(session, requested, model, messages, params, body)
        with self._lock:
            session.calls += 1
            over = session.max_calls is not None and session.calls > session.max_calls
        if over:
            raise Refusal(429, f"this session's limit of {session.max_calls} model calls is reached",
                          "call_limit_reached")
        return Admitted(session, requested, model, messages, params, body)

    def answered(self, session: Session) -> None:
        with self._lock:
            session.answered += 1

    def failed(self, session: Session | None, model: str | None = None) -> None:
        """Count a call of `session` that failed at the provider (of `model`: the one to probe), or was refused
        once every call stopped; before the caller hears of it, so a reply that came after it is known to have
        met it."""
        if session is None:
            return
        with self._lock:
            session.provider_failures += 1
            if model is not None:
                session.failed_model = model

    def refused(self, session: Session | None, kind: str) -> None:
        """Note a call of `session` refused for `kind`: the budget's are counted (the meta step tells a budget
        stop from a failure)."""
        if session is not None and kind == BUDGET_EXCEEDED:
            with self._lock:
                session.budget_refused += 1

    def counts(self, key: str) -> Session | None:
        """A copy of the session of `key` with its counts (None for a key never made here)."""
        session = self.sessions.get(key)
        with self._lock:
            return dataclasses.replace(session) if session else None

    def provider_failures(self, key: str) -> int:
        session = self.sessions.get(key)
        with self._lock:
            return session.provider_failures if session else 0
