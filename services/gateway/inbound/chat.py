"""OpenAI's chat completions, the protocol agent/llm.py, litellm's and openai's clients speak: its requests
are already the gateway's form, so reading one is checking it (params.py)."""

from __future__ import annotations

from services.config import GatewayConfig
from services.gateway.inbound.base import Event, Reply, error_reply
from services.gateway.params import Refusal, checked


class ChatCompletions:
    name = "chat"
    paths = ("/v1/chat/completions", "/chat/completions")
    counts = False

    @staticmethod
    def model(body: dict) -> str:
        requested = body.get("model")
        if not isinstance(requested, str) or not isinstance(body.get("messages"), list):
            raise Refusal(400, "a chat request needs a model string and a messages list")
        return requested

    @staticmethod
    def request(body: dict, gw: GatewayConfig) -> tuple[list, dict]:
        if body.get("stream"):
            raise Refusal(400, "the gateway does not stream; call without stream=True")
        return checked(body, gw)

    @staticmethod
    def reply(payload: dict, requested: str) -> dict:
        return dict(payload, model=requested)

    @staticmethod
    def streams(body: dict) -> bool:
        return False  # refused by `request`

    @staticmethod
    def events(answer: dict) -> list[Event]:
        return []

    @staticmethod
    def error(status: int, message: str, kind: str) -> Reply:
        return error_reply(status, message, kind)
