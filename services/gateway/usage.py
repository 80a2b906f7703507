"""What an answered call used, on its ledger row: its tokens, its cost (the provider prices every answer,
services/provider/), and the prompt tokens the provider read from its prompt cache or wrote to it, with
what that saved."""

from __future__ import annotations

from services.gateway.pricing import Pricing
from services.ledger import Call
from services.provider import Answer


def account(call: Call, answer: Answer, pricing: Pricing | None = None) -> dict:
    """Put `answer`'s usage and cost on `call` and, at `pricing`, what its cached prompt tokens saved; returns
    the answer's JSON."""
    used = answer.usage
    call.prompt_tokens, call.completion_tokens = used.prompt_tokens, used.completion_tokens
    call.cost_usd = used.cost_usd
    call.cached_tokens, call.cache_write_tokens = used.cached_tokens, used.cache_write_tokens
    if pricing is not None and (call.cached_tokens or call.cache_write_tokens):
        call.cache_saved_usd = pricing.cache_saved(call.cached_tokens, call.cache_write_tokens)
    return answer.payload
