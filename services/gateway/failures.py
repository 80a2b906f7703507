"""What a failed provider call tells the user, and the gateway's own small calls.

Whether a failure is the provider's (or the way to it) or the request's is the provider's to say
(services/provider/, `Provider.failure`), from the gateway's own call, never from anything agent
code says: the breaker counts the provider's failures (breaker.py), and a harness row that met one
is an infrastructure event, redone rather than scored. Here: what a failed first call means for the
set-up (the preflight), said in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.config import Config
from services.errors import UserError
from services.gateway.usage import account
from services.ledger import Call
from services.local_model import is_local
from services.provider import Provider, Route, Setup
from services.providers import redact

PROVIDER_DOWN = "provider_down"  # the error type of a call refused because the breaker tripped
PROBE = [{"role": "user", "content": "Reply with OK."}]  # the breaker's own call; agent code never shapes it


def preflight_problem(provider: Provider, exc: Exception, model: str) -> str | None:
    """What a failed first call says about the set-up; None when the provider answered at all
    (a refusal of this tiny request, or a rate limit, still proves it is reachable)."""
    setup = provider.failure(exc).setup
    if setup is None:
        return None
    detail = redact(str(exc)).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return {
        Setup.UNREACHABLE: f"cannot reach the provider of {model}: {detail} (check the network, or the *_API_BASE "
                           "variable)",
        Setup.KEY_REFUSED: f"the provider refused the key for {model}: {detail}",
        Setup.UNKNOWN_MODEL: f"the provider does not know the model {model}: {detail}",
    }[setup]


def preflight(config: Config, provider: Provider, models: list[str], run_id: str,
              book: Callable[[Call], None]) -> None:
    """One tiny call to each provider model, so that a wrong key, an unknown model name or an
    unreachable provider stops the run at once with one line, not as an error on every row; each
    call `book`ed. Local models are checked when their server starts instead."""
    for model in sorted({config.resolve_model(m) for m in models}):
        if is_local(model):
            continue
        started = time.monotonic()
        call = Call(run_id, "preflight", "preflight", model)
        try:
            account(call, provider.complete(Route(model), PROBE, {"max_tokens": 16}, timeout=60))
        except Exception as e:
            call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            problem = preflight_problem(provider, e, model)
            if problem:
                raise UserError(problem) from None
        finally:
            call.latency_s = time.monotonic() - started
            book(call)
