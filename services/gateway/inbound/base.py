"""What an inbound protocol is to the gateway: a wire format callers speak, read into the one request the
gateway admits, replays, budgets, forwards and books, and its answer written back in that format.

The request inside the gateway is OpenAI's chat form (messages and checked parameters: params.py), the
form the provider is called in (services/provider/); a protocol of another shape translates to it and
from it, in its own file beside chat.py. Every protocol's calls go the one way through the gateway
(sessions, caps, the response cache, the budget, the breaker, the ledger), so none of that is written
twice.

Streaming: the gateway calls the provider without streaming, and a caller that asked for a stream gets
the whole answer written as its protocol's server-sent events (`events`), in one reply of known length.
The answer is no later than a streamed one would end, the cache and the ledger see one answer as for any
call, and a Ray node's door (services/sandbox/ray_channel.py) carries it as JSON and writes the events
on the node, as the listener here does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from services.config import GatewayConfig

# One server-sent event: its name (None: unnamed) and its data, JSON or a text as it is (chat's "[DONE]").
Event = tuple[str | None, dict | str]


@dataclass
class Reply:
    status: int
    body: dict
    headers: dict


def error_reply(status: int, message: str, kind: str) -> Reply:
    """An error as OpenAI's API writes it (the chat protocol's, and the listener's own refusals')."""
    return Reply(status, {"error": {"message": message, "type": kind, "code": status}}, {})


def event_stream(events: list[Event]) -> bytes:
    """Events as the text of a server-sent event stream."""
    lines = []
    for name, data in events:
        if name is not None:
            lines.append(f"event: {name}\n")
        lines.append(f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(lines).encode()  # ASCII: JSON escapes what a model wrote (a lone surrogate included)


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

    @property
    def counts(self) -> bool:
        """Whether it only asks how many tokens a prompt holds: answered by the gateway's estimate, with no
        provider call (Anthropic's count_tokens); `reply` then gets {"usage": {"prompt_tokens": N}}."""
        ...

    def model(self, body: dict) -> str:
        """The model the caller asked for; a 400 Refusal (params.py) for a body that is not a request."""
        ...

    def request(self, body: dict, gw: GatewayConfig) -> tuple[list, dict]:
        """The request's messages and parameters in OpenAI's chat form, checked (params.py); a Refusal for
        what may not go on."""
        ...

    def reply(self, payload: dict, body: dict) -> dict:
        """The answer (OpenAI's chat-completions JSON, as the provider gave it) in this protocol's form, as the
        answer to the request `body` (admitted: its model is a string), naming the model as the caller did."""
        ...

    def streams(self, body: dict) -> bool:
        """Whether the caller asked for its answer as server-sent events."""
        ...

    def events(self, answer: dict) -> list[Event]:
        """An answer of `reply` as this protocol's event stream."""
        ...

    def error(self, status: int, message: str, kind: str) -> Reply:
        """A refusal or a failed call in this protocol's form."""
        ...


def in_shape(inbound: Inbound, refused: Reply) -> Reply:
    """A refusal in OpenAI's shape (the listener's own, as `Answerer.refuse` writes them) in `inbound`'s."""
    error = refused.body.get("error")
    error = error if isinstance(error, dict) else {}
    reply = inbound.error(refused.status, str(error.get("message", "")), str(error.get("type", "")))
    reply.headers.update(refused.headers)
    return reply
