"""OpenAI's chat completions, the protocol agent/llm.py, litellm's and openai's clients speak: its requests
are already the gateway's form, so reading one is checking it (params.py). A streamed request (`stream`,
with `stream_options`) gets the whole answer as chunks: per choice its text and its tool calls, then its
finish reason with the usage, then `[DONE]`."""

from __future__ import annotations

from services.config import GatewayConfig
from services.gateway.inbound.base import Event, Reply, error_reply
from services.gateway.inbound.shapes import mapping, need
from services.gateway.params import Refusal, checked


def _chunk(answer: dict, index: int, delta: dict, finish: str | None = None) -> dict:
    return {"id": answer.get("id"), "object": "chat.completion.chunk", "created": answer.get("created"),
            "model": answer.get("model"), "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def chunks(answer: dict) -> list[Event]:
    """A chat answer as the chunks a streamed one comes in."""
    events: list[Event] = []
    for i, picked in enumerate(c for c in answer.get("choices") or () if isinstance(c, dict)):
        said = mapping(picked.get("message"))
        events.append((None, _chunk(answer, i, {"role": "assistant", "content": said.get("content") or ""})))
        for j, call in enumerate(said.get("tool_calls") or ()):
            events.append((None, _chunk(answer, i, {"tool_calls": [{"index": j, **call}]})))
        events.append((None, _chunk(answer, i, {}, picked.get("finish_reason") or "stop")))
    last = events[-1][1] if events and isinstance(events[-1][1], dict) else _chunk(answer, 0, {}, "stop")
    return [*events[:-1], (None, {**last, "usage": answer.get("usage")}), (None, "[DONE]")]


class ChatCompletions:
    name = "chat"
    paths = ("/v1/chat/completions", "/chat/completions")
    counts = False
    events = staticmethod(chunks)

    @staticmethod
    def model(body: dict) -> str:
        requested = body.get("model")
        if not isinstance(requested, str) or not isinstance(body.get("messages"), list):
            raise Refusal(400, "a chat request needs a model string and a messages list")
        return requested

    @staticmethod
    def request(body: dict, gw: GatewayConfig) -> tuple[list, dict]:
        if body.get("stream") is not None:
            need(body["stream"], bool, "stream")
        if body.get("stream_options") is not None:  # the usage comes with the last chunk in any case
            options = need(body["stream_options"], dict, "stream_options")
            if set(options) - {"include_usage"}:
                raise Refusal(400, "field 'stream_options' may hold include_usage only")
        return checked({k: v for k, v in body.items() if k != "stream_options"}, gw)

    @staticmethod
    def reply(payload: dict, body: dict) -> dict:
        return dict(payload, model=body["model"])

    @staticmethod
    def streams(body: dict) -> bool:
        return body.get("stream") is True

    @staticmethod
    def error(status: int, message: str, kind: str) -> Reply:
        return error_reply(status, message, kind)
