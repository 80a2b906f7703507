"""What a provider's response says a call used: its tokens, its cost (litellm prices every response with its
table), and the prompt tokens the provider read from its prompt cache or wrote to it, with what that saved."""

from __future__ import annotations

from services.gateway.pricing import Pricing
from services.ledger import Call
from services.providers import _litellm


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


def account(call: Call, response: object, pricing: Pricing | None = None) -> dict:
    """Put `response`'s usage and cost on `call` and, at `pricing`, what its cached prompt tokens saved; returns
    the response's JSON."""
    if not isinstance(response, _litellm().ModelResponse):  # a stream or a coroutine: the gateway asks for neither
        raise TypeError(f"litellm answered a {type(response).__name__}, not a ModelResponse")
    payload = response.model_dump(mode="json")
    usage = payload.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    call.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    call.completion_tokens = int(usage.get("completion_tokens") or 0)
    call.cost_usd = float((getattr(response, "_hidden_params", None) or {}).get("response_cost") or 0.0)
    # litellm puts every provider's cache counts where OpenAI reports them (prompt_tokens_details), and
    # Anthropic's also under Anthropic's own names.
    call.cached_tokens = _count(details.get("cached_tokens")) or _count(usage.get("cache_read_input_tokens"))
    call.cache_write_tokens = _count(details.get("cache_creation_tokens")) or _count(
        usage.get("cache_creation_input_tokens"))
    if pricing is not None and (call.cached_tokens or call.cache_write_tokens):
        call.cache_saved_usd = pricing.cache_saved(call.cached_tokens, call.cache_write_tokens)
    return payload
