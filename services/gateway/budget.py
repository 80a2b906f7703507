"""The run's budgets, in USD and in tokens: what calls have spent, what calls in flight hold, and the most
one call may cost.

A call is admitted only when its worst case, on top of what is spent and held, fits both budgets; it
holds that worst case until it ends, so concurrent calls cannot together pass a budget. A call that would
fit but for what calls in flight hold waits for them to end.

A call whose worst case does not fit what is left is refused. That alone does not end the run: agent code
can send a call of any size (a prompt of many megabytes, every choice at the largest max_tokens), and one
such call must not stop a run that still has money for ordinary ones. The budget counts as spent once a
budget is used up, or once what is left cannot hold even the ordinary form of a refused call: one choice,
a prompt of at most ORDINARY_PROMPT_BYTES.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from services.config import GatewayConfig
from services.gateway.params import Refusal
from services.gateway.pricing import Pricing
from services.ledger import Call, Totals

BUDGET_EXCEEDED = "budget_exceeded"  # the kind of a refusal for money or tokens the budget cannot hold

ORDINARY_PROMPT_BYTES = 2**16  # the longest prompt of an ordinary call: a grading row is a few KB to tens of KB


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


class WorstCase(NamedTuple):
    """The most a call can cost, and the most its ordinary form can (one choice, a prompt of at most
    ORDINARY_PROMPT_BYTES); unpacked, the arguments of `Budget.reserve` and `Budget.release`."""

    usd: float
    tokens: int
    ordinary_usd: float
    ordinary_tokens: int


def worst_case(pricing: Pricing, prompt_bytes: int, params: dict) -> WorstCase:
    """The most a call can cost, in USD and in tokens: a token per prompt byte, and every output
    token it may ask for in each of its `n` choices, each at the model's dearest tier."""
    per_choice = max(params.get("max_tokens", 0), params.get("max_completion_tokens", 0))
    output, prompt = per_choice * params.get("n", 1), min(prompt_bytes, ORDINARY_PROMPT_BYTES)
    return WorstCase(prompt_bytes * pricing.dearest_input_usd + output * pricing.dearest_output_usd,
                     prompt_bytes + output,
                     prompt * pricing.dearest_input_usd + per_choice * pricing.dearest_output_usd, prompt + per_choice)


class Budget:
    """What a run has spent (counted as the ledger's `totals` counts it) and what its calls in flight hold."""

    def __init__(self, gw: GatewayConfig, spent: Totals) -> None:
        self.gw = gw
        self._lock = threading.Condition()  # notified when a call in flight gives back its hold
        self._spent = spent
        self._held_usd = 0.0  # worst cases of the calls in flight, held against the budgets
        self._held_tokens = 0
        self._out: str | None = None  # why what is left cannot hold an ordinary call (spending only grows)

    def spent(self) -> Totals:
        with self._lock:
            return Totals(**vars(self._spent))

    def left_message(self) -> str | None:
        """Why no new call may start (a budget is used up, or what is left cannot hold an ordinary call),
        or None while the budget allows one."""
        with self._lock:
            return exhausted(self.gw, self._spent) or self._out

    def add(self, call: Call) -> None:
        """Add a booked call to the totals."""
        with self._lock:
            s = self._spent
            s.calls += 1
            s.prompt_tokens += call.prompt_tokens
            s.completion_tokens += call.completion_tokens
            s.cost_usd += call.cost_usd
            s.cache_hits += int(call.cache_hit)
            s.errors += call.error is not None
            s.cached_tokens += call.cached_tokens
            s.cache_write_tokens += call.cache_write_tokens
            s.cache_saved_usd += call.cache_saved_usd

    def add_refused(self, count: int) -> None:
        """Add requests refused before any provider call (services/gateway/refusals.py) to the totals."""
        with self._lock:
            self._spent.refused += count

    def reserve(self, cost: float, tokens: int, ordinary_cost: float, ordinary_tokens: int) -> None:
        """Hold a call's worst case against the budgets until it ends, waiting while calls in flight hold
        what it needs; a 402 when, on top of what is spent, it could pass a budget. The run counts as out
        of budget then only if the call's ordinary form could not be held either."""
        with self._lock:
            while not (problem := exhausted(self.gw, self._spent)):
                past = self._past_budget(cost, tokens)
                if past:
                    ordinary = self._past_budget(ordinary_cost, ordinary_tokens, "an ordinary call")
                    if ordinary:
                        self._out = self._out or f"{ordinary[0]} exhausted: {ordinary[1]}"
                        problem = self._out
                    else:
                        problem = (f"this call could pass the {past[0]}: {past[1]}; a smaller max_tokens, n or "
                                   "prompt lowers that (the budget still holds an ordinary call)")
                    break
                if self._fits_beside_held(cost, tokens):
                    self._held_usd += cost
                    self._held_tokens += tokens
                    return
                self._lock.wait()
        raise Refusal(402, problem, BUDGET_EXCEEDED)

    def _past_budget(self, cost: float, tokens: int, what: str = "this call") -> tuple[str, str] | None:
        """Which budget `what`, a call of this worst case, could pass on top of what is spent, and how; None
        if neither."""
        gw, s = self.gw, self._spent
        if gw.budget_usd is not None and s.cost_usd + cost > gw.budget_usd:
            return "budget", (f"${s.cost_usd:.4f} spent leaves less of gateway.budget_usd ${gw.budget_usd:.4f} "
                              f"than {what} may cost (${cost:.4f})")
        if gw.budget_tokens is not None and s.tokens + tokens > gw.budget_tokens:
            return "token budget", (f"{s.tokens} spent leave less of gateway.budget_tokens {gw.budget_tokens} "
                                    f"than {what} may use ({tokens})")
        return None

    def _fits_beside_held(self, cost: float, tokens: int) -> bool:
        gw, s = self.gw, self._spent
        return ((gw.budget_usd is None or s.cost_usd + self._held_usd + cost <= gw.budget_usd)
                and (gw.budget_tokens is None or s.tokens + self._held_tokens + tokens <= gw.budget_tokens))

    def release(self, cost: float, tokens: int, *ordinary: float) -> None:
        """Give back a finished call's hold (its real cost is booked by then) and wake the calls waiting
        for room; `ordinary`, the rest of its WorstCase, was never held."""
        with self._lock:
            self._held_usd -= cost
            self._held_tokens -= tokens
            self._lock.notify_all()
