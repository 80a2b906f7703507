"""A small LLM client: one chat call through the run's gateway, text plus usage back.

Inside a run the trusted core sets AGENT_GATEWAY_URL and AGENT_GATEWAY_KEY; calls go
there as an OpenAI-compatible endpoint, and the gateway forwards them to the real
provider. Outside a run (no gateway in the environment) the call goes straight to
the provider with litellm, using the provider's own environment variables.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

litellm.suppress_debug_info = True

MAX_ATTEMPTS = 2  # the gateway already retries provider errors; this covers an empty answer


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, other: "Usage") -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls


@dataclass
class LLMReply:
    text: str
    usage: Usage = field(default_factory=Usage)
    # Native tool calls, in the OpenAI message format ({"id", "type", "function": {"name", "arguments"}}),
    # when the call passed `tools=`; empty otherwise.
    tool_calls: list[dict] = field(default_factory=list)


def _route(model: str) -> dict:
    url = os.environ.get("AGENT_GATEWAY_URL")
    if not url:
        return {"model": model}
    # The gateway is an OpenAI-compatible server: litellm's provider for those (named for
    # vLLM) sends the rest of the string as the model name, which the gateway resolves. It
    # takes every OpenAI parameter and, unlike "openai/", skips the openai SDK's request
    # and response models: about a millisecond less CPU a call, on every row.
    route = f"hosted_vllm/{model}"
    _price_at_zero(route)
    return {"model": route, "api_base": url, "api_key": os.environ.get("AGENT_GATEWAY_KEY", "")}


_priced: set[str] = set()
_priced_lock = threading.Lock()


def _price_at_zero(route: str) -> None:
    """Give litellm a zero price for a gateway route, once per process.

    The gateway prices every call (its cost comes back in a header). Without a price here,
    litellm looks the gateway's model name up after every call, fails, and formats a
    traceback: about a millisecond of CPU a call, spent on a number nobody reads.
    """
    with _priced_lock:
        if route in _priced:
            return
        free = dict.fromkeys(("input_cost_per_token", "output_cost_per_token", "cache_creation_input_token_cost",
                              "cache_read_input_token_cost"), 0.0)
        litellm.register_model({route: {**free, "litellm_provider": "hosted_vllm", "mode": "chat"}})
        _priced.add(route)


def needs_constrained_decoding(model: str) -> bool:
    """Whether `model` only answers in a usable shape when decoding follows a schema.

    The run says so in AGENT_STRUCTURED_MODELS (its small local models); other models
    answer freely, since forcing the shape of a strong model's answer cuts its reasoning.
    """
    return model in os.environ.get("AGENT_STRUCTURED_MODELS", "").split(",")


def get_response(
    messages: list[dict],
    model: str,
    temperature: float | None = None,
    max_tokens: int | None = None,
    schema: dict | None = None,
    **params,
) -> LLMReply:
    """One completion of `messages`; retries once when the model answers with nothing.

    `schema` is the JSON schema of the answer, enforced only where the model needs it
    (see `needs_constrained_decoding`); then the answer is a bare JSON object.
    `params` go to litellm as they are, e.g. `tools=[{"type": "function", ...}]` for native tool calls.
    """
    extra = dict(params)
    if schema is not None and needs_constrained_decoding(model):
        extra["response_format"] = {"type": "json_object", "schema": schema}
    if temperature is not None:
        extra["temperature"] = temperature
    if max_tokens is not None:
        extra["max_tokens"] = max_tokens
    if extra.get("tools"):
        # litellm otherwise imports its MCP gateway support to inspect the tools, which needs the
        # optional `mcp` package; plain function tools never need it.
        extra["_skip_mcp_handler"] = True
    usage = Usage()
    text, tool_calls = "", []
    for _ in range(MAX_ATTEMPTS):
        response = litellm.completion(messages=messages, num_retries=0, **_route(model), **extra)
        u = getattr(response, "usage", None)
        usage.add(Usage(getattr(u, "prompt_tokens", 0) or 0, getattr(u, "completion_tokens", 0) or 0, 1))
        message = response.choices[0].message
        text = message.content or ""
        tool_calls = [call.model_dump() for call in getattr(message, "tool_calls", None) or []]
        if text.strip() or tool_calls:
            break
    return LLMReply(text, usage, tool_calls)
