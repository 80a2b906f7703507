"""The protocols callers may speak to the gateway, each a file: base.py says what one is.

    chat.py       OpenAI's chat completions (POST /v1/chat/completions): agent/llm.py, litellm, mini-swe-agent
    messages.py   Anthropic's Messages (POST /v1/messages, and its count_tokens): Claude Code
    responses.py  OpenAI's Responses (POST /v1/responses): Codex CLI
    shapes.py     what messages.py and responses.py share: checked reading, the answer's tokens

A new protocol is a file beside these and a line in PROTOCOLS; the listener routes its paths to it and
the gateway treats its calls as every other's.
"""

from services.gateway.inbound.base import Event, Inbound, Reply, error_reply, event_stream, in_shape
from services.gateway.inbound.chat import ChatCompletions
from services.gateway.inbound.messages import CountTokens, Messages
from services.gateway.inbound.responses import Responses

CHAT = ChatCompletions()
PROTOCOLS: dict[str, Inbound] = {p.name: p for p in (CHAT, Messages(), CountTokens(), Responses())}
BY_PATH: dict[str, Inbound] = {path: p for p in PROTOCOLS.values() for path in p.paths}

__all__ = ["BY_PATH", "CHAT", "PROTOCOLS", "Event", "Inbound", "Reply", "error_reply", "event_stream", "in_shape"]
