"""The gateway's breaker: a provider that fails call after call stops the run, not every row.

Each model has a count of provider failures in a row (each after the gateway's retries); one
answered call starts it again. When the count reaches `gateway.breaker_failures`, the gateway
makes one small call of its own to that model (the probe). Agent code can make its own calls
fail (a reply too long for the timeout, prompts that drain a rate limit), never this one: if
the probe is answered, the provider is up and the count starts again; if it fails too, the
breaker trips. A model whose server is known dead (`health`, the local model's) trips it at
once: that stop is this machine's failure (`dead`; MachineDown), not a provider's. Once tripped it
stays tripped: every later call is refused, and the run stops resumably.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Check = Callable[[str], "str | None"]  # a model -> why it cannot answer, or None


def first_line(text: str, limit: int = 300) -> str:
    """The first line of a provider's error, cut short: the breaker's reason is one line."""
    lines = text.strip().splitlines()
    return lines[0][:limit] if lines else ""


class Breaker:
    def __init__(self, failures: int, probe: Check, health: Check | None = None) -> None:
        self.failures = failures  # failures in a row of one model before the probe
        self._probe = probe  # one small call of the gateway's own: None when answered, else the error
        self._health = health  # a model -> why its server is dead, or None (a local model's)
        self._lock = threading.Lock()
        self._runs: dict[str, int] = {}  # model -> its provider failures since its last answered call
        self._errors: dict[str, str] = {}  # model -> the first line of its last failure
        self._probing: set[str] = set()
        self._reason: str | None = None
        self.dead = False  # tripped because a server of this machine died (`health`): the machine's failure

    @property
    def reason(self) -> str | None:
        """Why the breaker tripped, as one line; None while calls go through."""
        return self._reason

    def answered(self, model: str) -> None:
        with self._lock:
            self._runs[model] = 0

    def failed(self, model: str, error: str) -> None:
        """A call for `model` failed at its provider with `error`: trip at once when its server is
        dead; at the count's limit, probe (in this thread, one probe per model at a time)."""
        dead = self._health(model) if self._health else None
        if dead:
            self.trip(first_line(dead), dead=True)
            return
        with self._lock:
            runs = self._runs[model] = self._runs.get(model, 0) + 1
            self._errors[model] = first_line(error)
            if runs < self.failures or model in self._probing or self._reason:
                return
            self._probing.add(model)
        try:
            self.confirm(model, f"failed {runs} times in a row")
        finally:
            with self._lock:
                self._probing.discard(model)

    def confirm(self, model: str, what: str) -> None:
        """Probe `model`: trip, saying the provider `what` and its last error, when the probe fails
        too; else its count starts again."""
        if self._probe(model) is None:
            with self._lock:
                self._runs[model] = 0
            return
        with self._lock:
            error = self._errors.get(model, "")
        self.trip(f"provider for {model} {what}: {error}")

    def confirm_failing(self) -> None:
        """Probe every model whose last call failed at its provider (see `confirm`)."""
        with self._lock:
            failing = {model: runs for model, runs in self._runs.items() if runs}
        for model, runs in failing.items():
            self.confirm(model, f"failed {runs} times in a row")

    def trip(self, reason: str, dead: bool = False) -> None:
        with self._lock:
            if self._reason is None:
                self._reason, self.dead = reason, dead
