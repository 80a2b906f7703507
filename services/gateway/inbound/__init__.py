"""The protocols callers may speak to the gateway, each a file: base.py says what one is.

    chat.py  OpenAI's chat completions (POST /v1/chat/completions)

A new protocol (Anthropic's Messages, OpenAI's Responses) is a file beside chat.py and a line in
PROTOCOLS; the listener routes its paths to it and the gateway treats its calls as every other's.
"""

from services.gateway.inbound.base import Inbound, Reply, error_reply
from services.gateway.inbound.chat import ChatCompletions

CHAT = ChatCompletions()
PROTOCOLS: dict[str, Inbound] = {p.name: p for p in (CHAT,)}
BY_PATH: dict[str, Inbound] = {path: p for p in PROTOCOLS.values() for path in p.paths}

__all__ = ["BY_PATH", "CHAT", "PROTOCOLS", "Inbound", "Reply", "error_reply"]
