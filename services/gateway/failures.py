"""What a failed provider call says: retry it, count it against the provider, or tell the user.

A provider failure is one the provider (or the way to it) made, not the request: the breaker
counts those (breaker.py), and a harness row that met one is an infrastructure event, redone
rather than scored. Which is which is decided here, from the gateway's own call to the
provider, never from anything agent code says.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.config import Config
from services.errors import UserError
from services.gateway.usage import account
from services.ledger import Call
from services.local_model import is_local
from services.providers import _litellm, redact

PROVIDER_DOWN = "provider_down"  # the error type of a call refused because the breaker tripped
PROBE = [{"role": "user", "content": "Reply with OK."}]  # the breaker's own call; agent code never shapes it


def preflight_problem(exc: Exception, model: str) -> str | None:
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


def preflight(config: Config, models: list[str], run_id: str, book: Callable[[Call], None]) -> None:
    """One tiny call to each provider model, so that a wrong key, an unknown model name or an
    unreachable provider stops the run at once with one line, not as an error on every row; each
    call `book`ed. Local models are checked when their server starts instead."""
    lit = _litellm()
    for model in sorted({config.resolve_model(m) for m in models}):
        if is_local(model):
            continue
        started = time.monotonic()
        call = Call(run_id, "preflight", "preflight", model)
        try:
            response = lit.completion(model=model, messages=[{"role": "user", "content": "Reply with OK."}],
                                      max_tokens=16, num_retries=0, timeout=60, drop_params=True)
            account(call, response)
        except Exception as e:
            call.error = redact(f"{type(e).__name__}: {e}")[:2000]
            problem = preflight_problem(e, model)
            if problem:
                raise UserError(problem) from None
        finally:
            call.latency_s = time.monotonic() - started
            book(call)


def is_provider_failure(exc: Exception) -> bool:
    """Whether a failed call says the provider (or the way to it) failed, rather than the request:
    what the breaker counts, and what makes a harness row an infrastructure event, not the agent's."""
    lit = _litellm()
    if is_transient(exc) or isinstance(exc, (lit.AuthenticationError, lit.PermissionDeniedError,
                                               lit.NotFoundError, UserError)):  # UserError: no local server
        return True
    status = getattr(exc, "status_code", None)
    return not (isinstance(status, int) and 400 <= status < 500)  # a 4xx left is the request's own fault


def is_transient(exc: Exception) -> bool:
    """Whether a failed attempt is worth another (the gateway's retries)."""
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
