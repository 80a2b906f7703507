"""A checked request's way to its provider: routed (routing.py), within the run's rate limits, retried
while a failure is worth another attempt, timed and priced; and the breaker's probe, the same way.

What failed and whose fault it was is the provider's to say (services/provider/, `Provider.failure`);
what the gateway does about it (count it, trip the breaker, answer the caller) is core.py's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.config import GatewayConfig
from services.gateway.caching import forwarded
from services.gateway.failures import PROBE
from services.gateway.pricing import Pricing
from services.gateway.routing import Routes
from services.gateway.sessions import Session
from services.gateway.usage import account
from services.ledger import Call
from services.provider import Answer, Failure, Provider
from services.providers import redact
from services.rate_limit import CallLimits


@dataclass
class Sent:
    """A forwarded call: its ledger row (tokens, cost, latency, attempts, or its error), and its answer's JSON
    or what its failure means."""

    call: Call
    payload: dict | None = None
    failure: Failure | None = None


class Forwarding:
    def __init__(self, gw: GatewayConfig, provider: Provider, routes: Routes, run_id: str,
                 book: Callable[[Call], None]) -> None:
        self.gw = gw
        self.provider = provider
        self.routes = routes
        self.run_id = run_id
        self._book = book  # for the probe's own call
        self._limits = CallLimits(gw.max_concurrent_calls, gw.requests_per_minute)

    def send(self, session: Session, model: str, messages: list, params: dict, pricing: Pricing) -> Sent:
        """Forward a checked request of `session`, marked for the provider's prompt cache (caching.py)."""
        started = time.monotonic()
        sent = Sent(Call(session.run_id, session.node, session.role, model))
        messages, params = forwarded(model, session, messages, params, self.gw.prompt_caching, self.provider)
        try:
            answer, sent.call.attempts = self._attempts(model, messages, params)
        except Exception as e:
            sent.call.latency_s = time.monotonic() - started
            sent.call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            sent.failure = self.provider.failure(e)
            return sent
        sent.call.latency_s = time.monotonic() - started
        sent.payload = account(sent.call, answer, pricing)
        return sent

    def probe(self, model: str) -> str | None:
        """The breaker's own small call to `model`: None when the provider answered (a refusal of the
        request is an answer too), else its error. Booked as node and role "probe"."""
        started = time.monotonic()
        call = Call(self.run_id, "probe", "probe", model)
        try:
            answer, call.attempts = self._attempts(model, PROBE, {"max_tokens": 16})
            account(call, answer)
        except Exception as e:
            call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            return call.error if self.provider.failure(e).providers_fault else None
        finally:
            call.latency_s = time.monotonic() - started
            self._book(call)
        return None

    def _attempts(self, model: str, messages: list, params: dict) -> tuple[Answer, int]:
        """The answer and how many attempts it took; the last attempt's error when none was answered."""
        route, messages, params = self.routes.route(model, messages, params)
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._limits.slot(model):  # its wait counts in the call's latency, as retries do
                    return self.provider.complete(route, messages, params, self.gw.request_timeout_s), attempt
            except Exception as e:
                if attempt > self.gw.max_retries or not self.provider.failure(e).retry:
                    raise
                delay = min(self.gw.backoff_max_s, self.gw.backoff_base_s * 2 ** (attempt - 1))
                time.sleep(random.uniform(0, delay))
