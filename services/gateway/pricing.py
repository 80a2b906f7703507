"""What a model costs, by one rule for the gateway's budget holds and the run's cost estimate.

A price is the config's `gateway.prices` entry where it has one (USD per 1M tokens), 0 for a
local model, and otherwise the provider's table (litellm's, services/provider/), with which litellm
also prices every response the gateway books (`register_price` gives it an entry for each allowed
model); 0 where no one knows the model: its tokens are still counted.

Prompt tokens a provider read from its prompt cache, or wrote to it, have rates of their own
(litellm's cache_read_input_token_cost and cache_creation_input_token_cost); where the table
has none, litellm charges them at the input price, and so does `Pricing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from services.gateway.caching import takes_marks
from services.local_model import DEFAULT_MAX_TOKENS, is_local
from services.provider import LITELLM, Provider

# Keys of litellm's table whose values are USD per token: the listed price and its tiers
# (long prompts, priority service, reasoning tokens, ...).
_INPUT = ("input_cost_per_token",)
_OUTPUT = ("output_cost_per_token", "output_cost_per_reasoning_token")
_READ, _WRITE = "cache_read_input_token_cost", "cache_creation_input_token_cost"
# A configured price of two numbers gives the cached rates at the ratio litellm's table lists for the model;
# for a model it does not list, these: Anthropic's (a read at a tenth of the input price, a five-minute write
# at 1.25 times it). Providers that bill no writes (OpenAI) report none, so their write rate is never used.
DEFAULT_READ_RATIO, DEFAULT_WRITE_RATIO = 0.1, 1.25


@dataclass(frozen=True)
class Pricing:
    input_usd: float = 0.0  # per prompt token, the listed price
    output_usd: float = 0.0  # per output token, the listed price
    dearest_input_usd: float = 0.0  # per prompt token, the dearest tier (long prompts cost more on some models)
    dearest_output_usd: float = 0.0  # per output token, the dearest tier (reasoning tokens included)
    max_output: int | None = None  # most tokens the model writes in one reply, where that is known
    cache_read_usd: float = 0.0  # per prompt token read from the provider's prompt cache, the listed price
    cache_write_usd: float = 0.0  # per prompt token written to the provider's prompt cache (five-minute), listed

    def cache_saved(self, read_tokens: int, written_tokens: int) -> float:
        """What a call's cached prompt tokens saved against the input price (less than 0 when writes cost
        more than reads saved), at the listed rates."""
        return read_tokens * (self.input_usd - self.cache_read_usd) - written_tokens * (self.cache_write_usd
                                                                                       - self.input_usd)


def _number(value: object) -> float | None:
    """`value` when it is an int or a float (a bool is neither here), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

def _configured(info: dict, price: list[float]) -> dict:
    """litellm table keys (USD per token) for a configured price: [input, output] per 1M tokens, or [input,
    output, cached read, cache write]; with two, cached rates as DEFAULT_READ_RATIO says."""
    per_token = [p / 1e6 for p in price]
    listed = info.get("input_cost_per_token")
    if len(per_token) == 4:
        read, write = per_token[2:]
    else:
        def ratio(key: str, default: float) -> float:
            rate, base = _number(info.get(key)), _number(listed)
            return rate / base if rate is not None and base is not None and base > 0 else default
        read, write = per_token[0] * ratio(_READ, DEFAULT_READ_RATIO), per_token[0] * ratio(_WRITE, DEFAULT_WRITE_RATIO)
    return {"input_cost_per_token": per_token[0], "output_cost_per_token": per_token[1], _READ: read, _WRITE: write}


def pricing_of(model: str, prices: dict, provider: Provider = LITELLM) -> Pricing:
    """`model`'s prices and output cap. `prices` is the config's gateway.prices (model -> [USD per 1M
    input tokens, per 1M output tokens(, per 1M cached read, per 1M cache write)]); its entry replaces
    litellm's listed prices, as `register_price` does in litellm's table, whose dearer tiers for the
    model still count."""
    info = {} if is_local(model) else _model_info(model, provider)
    if model in prices:
        info = {**info, **_configured(info, prices[model])}

    def dearest(*prefixes: str) -> float:
        return max((float(v) for k, v in info.items() if k.startswith(prefixes) and type(v) in (int, float)),
                   default=0.0)

    def listed(key: str) -> float:
        return float(info[key]) if type(info.get(key)) in (int, float) else 0.0

    def cached(key: str) -> float:  # as litellm prices it: at the input price where the table has no rate
        return listed(key) if type(info.get(key)) in (int, float) else listed("input_cost_per_token")

    # A prompt written to the cache of a provider that takes marks costs up to twice its input price (a one-hour
    # write): that is its dearest input.
    dearest_input = max(dearest(*_INPUT), dearest(_WRITE) if takes_marks(model, provider) else 0.0)
    most = DEFAULT_MAX_TOKENS if is_local(model) else info.get("max_output_tokens")
    return Pricing(listed("input_cost_per_token"), listed("output_cost_per_token"), dearest_input, dearest(*_OUTPUT),
                   most if type(most) is int and most > 0 else None, cached(_READ), cached(_WRITE))


def _model_info(model: str, provider: Provider = LITELLM) -> dict:
    """The provider's entry for `model` as it finds it for a call; else only the prices of its table's entry
    (provider.prices)."""
    known, info = provider.prices(model)
    return info if known else {k: v for k, v in info.items() if k.startswith(_INPUT + _OUTPUT + (_READ, _WRITE))}


@cache
def _own_listing(model: str, provider: Provider = LITELLM) -> tuple[bool, dict]:
    """Whether the provider finds `model` for a call, and what its own table lists for it: asked once, before
    this process registers anything over it."""
    known, info = provider.prices(model)
    return known, info if known else _model_info(model, provider)


def register_price(model: str, price: list[float] | None, provider: Provider = LITELLM) -> None:
    """Give the provider a price for `model` when the config sets one or it cannot find the model for a call.

    litellm prices every response itself (`_hidden_params["response_cost"]`); for a
    model it cannot find it first searches the whole table, on every call, and then gives
    up. A registered price makes that a dictionary lookup and lets a configured price take
    effect. Without one, the model keeps what litellm's own table lists for it, also where
    get_model_info misses it (0 where the table has nothing: tokens are still counted).
    """
    known, listed = _own_listing(model, provider)
    if price is None and known:
        return
    if price is None:  # the table's own prices, found under another name; cached rates at the input price if none
        rates = {k: float(listed.get(k) or 0.0) for k in ("input_cost_per_token", "output_cost_per_token")}
        rates.update({k: float(listed[k]) if type(listed.get(k)) in (int, float) else rates["input_cost_per_token"]
                      for k in (_READ, _WRITE)})
    else:
        rates = _configured(listed, price)
    provider.register_prices(model, rates)


def price_known(model: str, prices: dict, pricing: Pricing) -> bool:
    """Whether anyone knows what `model` costs (its `pricing`, as pricing_of gives it): a local model (free), a
    configured price (`gateway.prices`), or a price in the provider's table. Calls to any other model are
    booked at $0, which says nothing of what they cost."""
    return is_local(model) or model in prices or pricing.input_usd > 0 or pricing.output_usd > 0
