"""What a model costs, by one rule for the gateway's budget holds and the run's cost estimate.

A price is the config's `gateway.prices` entry where it has one (USD per 1M tokens), 0 for a
local model, and otherwise litellm's table, with which litellm also prices every response the
gateway books (`register_price` gives it an entry for each allowed model); 0 where no one
knows the model: its tokens are still counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from services.local_model import DEFAULT_MAX_TOKENS, is_local
from services.providers import _litellm, provider_of

# Keys of litellm's table whose values are USD per token: the listed price and its tiers
# (long prompts, priority service, reasoning tokens, ...).
_INPUT = ("input_cost_per_token",)
_OUTPUT = ("output_cost_per_token", "output_cost_per_reasoning_token")


@dataclass(frozen=True)
class Pricing:
    input_usd: float = 0.0  # per prompt token, the listed price
    output_usd: float = 0.0  # per output token, the listed price
    dearest_input_usd: float = 0.0  # per prompt token, the dearest tier (long prompts cost more on some models)
    dearest_output_usd: float = 0.0  # per output token, the dearest tier (reasoning tokens included)
    max_output: int | None = None  # most tokens the model writes in one reply, where that is known


def pricing_of(model: str, prices: dict) -> Pricing:
    """`model`'s prices and output cap. `prices` is the config's gateway.prices (model -> [USD per 1M
    input tokens, per 1M output tokens]); its entry replaces litellm's listed price, as `register_price`
    does in litellm's table, whose dearer tiers for the model still count."""
    info = {} if is_local(model) else _model_info(model)
    if model in prices:
        per_million_in, per_million_out = prices[model]
        info = {**info, "input_cost_per_token": per_million_in / 1e6, "output_cost_per_token": per_million_out / 1e6}

    def dearest(*prefixes: str) -> float:
        return max((float(v) for k, v in info.items() if k.startswith(prefixes) and type(v) in (int, float)),
                   default=0.0)

    def listed(key: str) -> float:
        return float(info[key]) if type(info.get(key)) in (int, float) else 0.0

    most = DEFAULT_MAX_TOKENS if is_local(model) else info.get("max_output_tokens")
    return Pricing(listed("input_cost_per_token"), listed("output_cost_per_token"), dearest(*_INPUT), dearest(*_OUTPUT),
                   most if type(most) is int and most > 0 else None)


def _model_info(model: str) -> dict:
    """litellm's entry for `model` as litellm finds it for a call; else only the prices of its table's entry
    under the name with or without its provider prefix (litellm resolves some providers' names only so)."""
    lit = _litellm()
    try:
        return dict(lit.get_model_info(model))
    except Exception:
        entry = lit.model_cost.get(model) or lit.model_cost.get(model.split("/", 1)[-1]) or {}
        return {k: v for k, v in entry.items() if k.startswith(_INPUT + _OUTPUT)}


@lru_cache(maxsize=None)
def _own_listing(model: str) -> tuple[bool, tuple[float, float]]:
    """Whether litellm finds `model` for a call, and the prices its own table lists for it (USD per 1M
    tokens, 0 where none): asked once, before this process registers anything over them."""
    try:
        _litellm().get_model_info(model)
        return True, (0.0, 0.0)
    except Exception:
        info = _model_info(model)
        return False, tuple(1e6 * float(info.get(k) or 0.0) for k in ("input_cost_per_token", "output_cost_per_token"))


def register_price(model: str, price: list[float] | None) -> None:
    """Give litellm a price for `model` when the config sets one or litellm cannot find it for a call.

    litellm prices every response itself (`_hidden_params["response_cost"]`); for a
    model it cannot find it first searches the whole table, on every call, and then gives
    up. A registered price makes that a dictionary lookup and lets a configured price take
    effect. Without one, the model keeps what litellm's own table lists for it, also where
    get_model_info misses it (0 where the table has nothing: tokens are still counted).
    """
    known, listed = _own_listing(model)
    if price is None and known:
        return
    price = price or listed
    entry = {"input_cost_per_token": price[0] / 1e6, "output_cost_per_token": price[1] / 1e6,
             "litellm_provider": provider_of(model), "mode": "chat"}
    if not known:  # cached tokens cost 0 either way; saying so keeps litellm from warning about it
        entry.update(cache_creation_input_token_cost=0.0, cache_read_input_token_cost=0.0)
    _litellm().register_model({model: entry})
