"""The LLM gateway: the only way out for agent code.

An OpenAI-compatible HTTP endpoint on 127.0.0.1, started per run by the trusted core.
Agent code (task, meta, grader) calls it with plain litellm and a base URL; the
gateway holds the provider keys, forwards through the host's provider (services/provider/:
litellm) to the real provider, retries transient errors, replays cached answers, enforces
the budget and the run's model allowlist, and writes every call to the ledger.

A caller authenticates with a session key (`new_session`) that names the run, node
and role its calls are booked to. Sandboxed code gets only such a key, never a
provider key.

    inbound/     the protocols callers speak (chat.py: OpenAI's chat completions), each read into one request
    params.py    what a request may carry (the allowlist of fields, each checked and capped)
    sessions.py  session keys: their node, role, models and lifetime (their sandbox's), and redaction
    models.py    the run's models: the allowlist, their prices, the providers' set-up paid ahead
    admission.py who may call what: session, models, fields, a session's cap on calls, the stop on every call
    replay.py    the response cache: answers replayed to the node and role that asks again
    budget.py    what is spent and held against the run's budgets
    pricing.py   what a model costs, cached prompt tokens too (also the run's cost estimate's prices)
    routing.py   where a call goes: the bundled local model's server, or the model's provider
    caching.py   prompt caching: the cache breakpoints the gateway asks providers for, and OpenAI's cache key
    forwarding.py a request on its way to the provider: routed, rate limited, retried; and the breaker's probe
    usage.py     what an answered call used, on its ledger row: tokens, cost, cached prompt tokens
    failures.py  what a failed first call says of the set-up (the preflight)
    breaker.py   provider failures in a row (and a failed probe) stop every call: the run stops, resumably
    machine.py   this machine's failures (the ledger's disk, the socket lost) stop every call the same way
    refusals.py  refused requests counted per (node, role, reason), at a bounded rate
    server.py    the HTTP endpoint and the Unix socket sandboxes reach it through, with bounded connections
    core.py      the Gateway: the above composed, and each request's way through them
"""

from services.gateway.core import Gateway, Session, open_gateway
from services.gateway.failures import PROVIDER_DOWN
from services.gateway.inbound import Reply
from services.gateway.pricing import Pricing, pricing_of, register_price
from services.gateway.server import SOCKET_DIR_PREFIX, remove_dead_socket_dirs
from services.gateway.sessions import redact as redact_keys

__all__ = ["PROVIDER_DOWN", "SOCKET_DIR_PREFIX", "Gateway", "Pricing", "Reply", "Session", "open_gateway", "pricing_of",
           "redact_keys", "register_price", "remove_dead_socket_dirs"]
