"""What the host asks of the library that reaches model providers, in the project's own terms.

The gateway and the judge speak to providers through a `Provider`: one call in OpenAI's chat form,
what a failed call means (retry it, count it against the provider, or blame the request), what a
model costs and what a call used. The program's provider is litellm's (litellm_provider.py); a test
or another library can stand in by the same few methods, and no other module needs to know which.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Route:
    """Where one call goes: a model as provider/name, and, for a server of OpenAI's kind that is not the
    provider's own (the bundled local model's, or the run's gateway for the judge), its address and key."""

    model: str
    api_base: str | None = None
    api_key: str | None = None


@dataclass(frozen=True)
class Usage:
    """What one answered call used, as the provider reported and priced it."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached_tokens: int = 0  # of the prompt tokens, those read from the provider's prompt cache
    cache_write_tokens: int = 0  # of the prompt tokens, those written to it


@dataclass(frozen=True)
class Answer:
    """An answered call: the reply as OpenAI's chat-completions JSON, and what it used."""

    payload: dict
    usage: Usage


class Setup(enum.Enum):
    """What a failed first call says is wrong with the set-up (the gateway's preflight)."""

    UNREACHABLE = "unreachable"  # no connection, a timeout: the network or an *_API_BASE
    KEY_REFUSED = "key refused"
    UNKNOWN_MODEL = "unknown model"


@dataclass(frozen=True)
class Failure:
    """What a failed call means, judged from the gateway's own call, never from what agent code says."""

    retry: bool  # worth another attempt: a rate limit, a 5xx, a lost connection, a timeout
    providers_fault: bool  # the provider (or the way to it) failed, not the request: the breaker counts it
    status: int  # the HTTP status the caller is answered with
    setup: Setup | None = None  # for a first call: what it says of the set-up (None: the provider answered)


class Provider(Protocol):
    """The calls, prices and failures of model providers, as the gateway and the judge need them."""

    def complete(self, route: Route, messages: list, params: dict, timeout: float | None) -> Answer:
        """One call, not retried, in OpenAI's chat form (`params` already checked), within `timeout` seconds
        (None: the library's own); raises on failure."""
        ...

    def failure(self, error: Exception) -> Failure:
        """What `error`, raised by `complete` (or by the way to a local model's server), means."""
        ...

    def family(self, model: str) -> str:
        """The provider `model` is sent to (openai, anthropic, ...); UserError for a model it does not know."""
        ...

    def missing_keys(self, model: str) -> list[str]:
        """The environment variables `model` needs that are not set (empty: it can be called)."""
        ...

    def prices(self, model: str) -> tuple[bool, dict]:
        """Whether the provider's price table finds `model` for a call, and its entry there (USD per token,
        in litellm's keys: input_cost_per_token, output_cost_per_token, cache_read_input_token_cost, ...)."""
        ...

    def register_prices(self, model: str, rates: dict) -> None:
        """Price `model`'s later calls at `rates` (keys as `prices` gives them)."""
        ...

    def warm_up(self, families: list[str]) -> threading.Thread | None:
        """Start paying the first-call set-up of these providers before their first real call, on a daemon
        thread, returned so that its owner can join it before the process exits (None: nothing to pay)."""
        ...
