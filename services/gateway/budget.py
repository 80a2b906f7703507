"""The run's budgets, in USD and in tokens: what calls have spent, what calls in flight hold, and the most
one call may cost.

A call is admitted only when its worst case, on top of what is spent and held, fits both budgets; it
holds that worst case until it ends, so concurrent calls cannot together pass a budget.
"""

from __future__ import annotations

import threading

from services.config import GatewayConfig
from services.gateway.params import Refusal
from services.gateway.pricing import Pricing
from services.ledger import REFUSED, Call, Totals


def exhausted(gw: GatewayConfig, spent: Totals) -> str | None:
    """Which budget `spent` has used up, in words; None while both have room."""
    if gw.budget_usd is not None and spent.cost_usd >= gw.budget_usd:
        return f"budget exhausted: spent ${spent.cost_usd:.4f} of ${gw.budget_usd:.4f}"
    if gw.budget_tokens is not None and spent.tokens >= gw.budget_tokens:
        return f"token budget exhausted: spent {spent.tokens} of {gw.budget_tokens} tokens"
    return None


def with_output_cap(params: dict, pricing: Pricing, gw: GatewayConfig) -> dict:
    """`params` with an explicit max_tokens when the caller set none: the provider then bounds the
    reply, so the call's reserved worst case holds."""
    if "max_tokens" in params or "max_completion_tokens" in params:
        return params
    most = pricing.max_output or gw.max_output_tokens
    return {**params, "max_tokens": min(gw.max_output_tokens, most)}


def worst_case(pricing: Pricing, prompt_bytes: int, params: dict) -> tuple[float, int]:
    """The most a call can cost, in USD and in tokens: a token per prompt byte, and every output
    token it may ask for in each of its `n` choices, each at the model's dearest tier."""
    output = max(params.get("max_tokens", 0), params.get("max_completion_tokens", 0)) * params.get("n", 1)
    return prompt_bytes * pricing.dearest_input_usd + output * pricing.dearest_output_usd, prompt_bytes + output


class Budget:
    """What a run has spent (counted as the ledger's `totals` counts it) and what its calls in flight hold."""

    def __init__(self, gw: GatewayConfig, spent: Totals):
        self.gw = gw
        self._lock = threading.Lock()
        self._spent = spent
        self._held_usd = 0.0  # worst cases of the calls in flight, held against the budgets
        self._held_tokens = 0
        self._refusal: str | None = None  # the first call the budget could not hold

    def spent(self) -> Totals:
        with self._lock:
            return Totals(**vars(self._spent))

    def left_message(self) -> str | None:
        """Why no new call may start (a budget is spent, or it already refused a call whose worst case it
        could not hold), or None while the budget allows one."""
        with self._lock:
            return exhausted(self.gw, self._spent) or self._refusal

    def add(self, call: Call) -> None:
        """Add a booked call to the totals."""
        refused = call.error is not None and call.error.startswith(REFUSED)
        with self._lock:
            s = self._spent
            s.calls += not refused
            s.refused += refused
            s.prompt_tokens += call.prompt_tokens
            s.completion_tokens += call.completion_tokens
            s.cost_usd += call.cost_usd
            s.cache_hits += int(call.cache_hit)
            s.errors += call.error is not None and not refused

    def reserve(self, cost: float, tokens: int) -> None:
        """Hold a call's worst case against the budgets until it ends; a 402 when that, on top of what is
        spent and held by calls in flight, could pass a budget."""
        gw = self.gw
        with self._lock:
            s = self._spent
            problem = exhausted(gw, s)
            if problem is None and gw.budget_usd is not None and s.cost_usd + self._held_usd + cost > gw.budget_usd:
                problem = (f"budget exhausted: ${s.cost_usd:.4f} spent and ${self._held_usd:.4f} held by calls in "
                           f"flight leave less of gateway.budget_usd ${gw.budget_usd:.4f} than this call may cost "
                           f"(${cost:.4f}; a smaller max_tokens lowers that)")
            if (problem is None and gw.budget_tokens is not None
                    and s.tokens + self._held_tokens + tokens > gw.budget_tokens):
                problem = (f"token budget exhausted: {s.tokens} spent and {self._held_tokens} held by calls in "
                           f"flight leave less of gateway.budget_tokens {gw.budget_tokens} than this call may use "
                           f"({tokens}; a smaller max_tokens lowers that)")
            if problem is None:
                self._held_usd += cost
                self._held_tokens += tokens
                return
            self._refusal = self._refusal or problem
        raise Refusal(402, problem, "budget_exceeded")

    def release(self, cost: float, tokens: int) -> None:
        """Give back a finished call's hold; its real cost is booked by then."""
        with self._lock:
            self._held_usd -= cost
            self._held_tokens -= tokens
