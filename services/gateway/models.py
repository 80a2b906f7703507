"""The run's models: which ones callers may ask for, what a call of each costs at worst, and the providers'
first-call set-up paid before the first row needs it.

A model joins the allowlist with its price registered at the provider (pricing.py: the config's price, or
the provider's table under another name), so the provider prices each answer as the budget expects.
"""

from __future__ import annotations

import contextlib
import threading

from services.config import Config
from services.errors import UserError
from services.gateway.pricing import Pricing, pricing_of, register_price
from services.local_model import is_local
from services.provider import Provider

WARM_UP_JOIN_S = 60.0  # a warm-up is a few stub calls; stop waits this long for it at most


class RunModels:
    def __init__(self, config: Config, provider: Provider) -> None:
        self.config = config
        self.provider = provider
        self._lock = threading.Lock()
        self._allowed: set[str] = set()
        self._pricing: dict[str, Pricing] = {}  # allowed model -> what its worst case costs
        self._warmed: set[str] = set()  # providers whose first-call set-up is paid (inside/warm_up.py)
        self._warm_ups: list[threading.Thread] = []  # joined by stop (see there)

    def allow(self, *models: str) -> None:
        """Add models (aliases or provider strings) that callers may request in this run."""
        resolved = {self.config.resolve_model(m) for m in models}
        prices = self.config.gateway.prices
        families: set[str] = set()
        pricing: dict[str, Pricing] = {}
        for model in resolved - self._allowed:
            if is_local(model):  # not a name the provider knows, and reached as an OpenAI server
                families.add("openai")
            else:
                register_price(model, prices.get(model), self.provider)
                with contextlib.suppress(UserError):
                    families.add(self.provider.family(model))
            pricing[model] = pricing_of(model, prices, self.provider)
        with self._lock:
            self._pricing.update(pricing)
            self._allowed.update(resolved)
            families -= self._warmed
            self._warmed |= families
        thread = self.provider.warm_up(sorted(families)) if families else None
        if thread is not None:
            self._warm_ups.append(thread)

    def __contains__(self, model: str) -> bool:
        return model in self._allowed

    def allowed(self) -> list[str]:
        with self._lock:
            return sorted(self._allowed)

    def pricing(self, model: str) -> Pricing:
        """What an allowed model costs (its worst case is held against the budget)."""
        return self._pricing[model]

    def stop(self) -> None:
        """Wait for the warm-ups: one still running when the interpreter exits could hang its exit."""
        for thread in self._warm_ups:
            thread.join(WARM_UP_JOIN_S)
