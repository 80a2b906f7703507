"""What an inbound protocol is to the gateway: a wire format callers speak, read into the one request the
gateway admits, replays, budgets, forwards and books, and its answer written back in that format.

The request inside the gateway is OpenAI's chat form (messages and checked parameters: params.py), the
form the provider is called in (services/provider/); a protocol of another shape translates to it and
from it, in its own file beside chat.py. Every protocol's calls go the one way through the gateway
(sessions, caps, the response cache, the budget, the breaker, the ledger), so none of that is written
twice. A protocol that streams (server-sent events) would also say here how its reply is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from services.config import GatewayConfig


@dataclass
class Reply:
    status: int
    body: dict
    headers: dict


def error_reply(status: int, message: str, kind: str) -> Reply:
    """An error as OpenAI's API writes it (the chat protocol's, and the listener's own refusals')."""
    return Reply(status, {"error": {"message": message, "type": kind, "code": status}}, {})


class Inbound(Protocol):
    """One wire format the gateway answers."""

    @property
    def name(self) -> str:
        """What the listener and a Ray node's door name it by."""
        ...

    @property
    def paths(self) -> tuple[str, ...]:
        """The POST paths it answers, the first the one a Ray node's door sends to."""
        ...

    def model(self, body: dict) -> str:
        """The model the caller asked for; a 400 Refusal (params.py) for a body that is not a request."""
        ...

    def request(self, body: dict, gw: GatewayConfig) -> tuple[list, dict]:
        """The request's messages and parameters in OpenAI's chat form, checked (params.py); a Refusal for
        what may not go on."""
        ...

    def reply(self, payload: dict, requested: str) -> dict:
        """The answer (OpenAI's chat-completions JSON, as the provider gave it) in this protocol's form, naming
        the model as the caller did."""
        ...

    def error(self, status: int, message: str, kind: str) -> Reply:
        """A refusal or a failed call in this protocol's form."""
        ...
