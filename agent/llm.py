"""A small LLM client: one chat call through the run's gateway, text plus usage back.

Inside a run the trusted core sets AGENT_GATEWAY_URL and AGENT_GATEWAY_KEY. The gateway is an
OpenAI-compatible endpoint that translates for every provider on the host, so the call is one
HTTP request made with the standard library: importing litellm would cost each sandboxed
process seconds of CPU and about 180 MB for nothing it needs here. Outside a run (no gateway
in the environment) the call goes straight to the provider with litellm, using the
provider's own environment variables; only then is litellm imported.

Each call through the gateway is also announced as the audit event USAGE_EVENT (tokens and
the gateway's cost), so the evaluation worker can count a row's usage without this module
knowing of it.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from litellm import ModelResponse

MAX_ATTEMPTS = 2  # the gateway already retries provider errors; this covers an empty answer
# Longer than one provider call at the gateway (gateway.request_timeout_s, 900 s by default) and
# a retry; a row and the meta agent have deadlines of their own. `timeout=` changes it per call.
TIMEOUT_S = 1800.0
USAGE_EVENT = "agent.llm.usage"  # sys.audit(USAGE_EVENT, prompt_tokens, completion_tokens, cost_usd)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, other: Usage) -> None:
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


class LLMError(Exception):
    """A call the gateway refused or could not make; `status_code` is its HTTP status (None when the
    gateway was not reached), e.g. 402 when the run's budget is spent."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


def needs_constrained_decoding(model: str) -> bool:
    """Whether `model` only answers in a usable shape when decoding follows a schema.

    The run says so in AGENT_STRUCTURED_MODELS (its small local models); other models
    answer freely, since forcing the shape of a strong model's answer cuts its reasoning.
    """
    return model in os.environ.get("AGENT_STRUCTURED_MODELS", "").split(",")


def _refusal(status: int, data: bytes) -> str:
    """The gateway's error message from its OpenAI-shaped error body, else the status and the body's start."""
    try:
        return str(json.loads(data)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        reason = http.client.responses.get(status, "")
        return f"HTTP {status} {reason}: {data[:500].decode('utf-8', 'replace')}"


def _post(url: str, key: str, body: dict, timeout: float) -> tuple[dict, float]:
    """POST one chat request to the gateway at `url`: (the completion, its cost in dollars)."""
    parts = urllib.parse.urlsplit(url)  # http on a loopback port: the sandbox's relay, or the host's gateway
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path.rstrip("/") + "/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        data = response.read()
        cost = response.getheader("x-gateway-cost-usd") or "0"
    except TimeoutError:
        raise LLMError(f"the gateway gave no answer within {timeout:g} s") from None
    except (OSError, http.client.HTTPException) as e:
        raise LLMError(f"cannot reach the gateway at {url}: {type(e).__name__}: {e}") from None
    finally:
        conn.close()
    if response.status != 200:
        raise LLMError(_refusal(response.status, data), response.status)
    try:
        return json.loads(data), float(cost)
    except ValueError:
        raise LLMError("the gateway's answer is not JSON") from None


def _through_gateway(url: str, model: str, messages: list[dict], params: dict) -> tuple[str, list[dict], Usage]:
    timeout = params.pop("timeout", None) or TIMEOUT_S
    completion, cost = _post(url, os.environ.get("AGENT_GATEWAY_KEY", ""),
                             {"model": model, "messages": messages, **params}, timeout)
    try:
        message = completion["choices"][0]["message"]
        counts = completion.get("usage") or {}
        usage = Usage(int(counts.get("prompt_tokens") or 0), int(counts.get("completion_tokens") or 0), 1)
    except (KeyError, IndexError, TypeError, ValueError):
        raise LLMError("the gateway's answer has no message") from None
    sys.audit(USAGE_EVENT, usage.prompt_tokens, usage.completion_tokens, cost)
    calls = [call for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    return message.get("content") or "", calls, usage


def _to_provider(model: str, messages: list[dict], params: dict) -> tuple[str, list[dict], Usage]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else litellm fetches prices at import
    import litellm

    litellm.suppress_debug_info = True
    if params.get("tools"):
        # litellm otherwise imports its MCP gateway support to inspect the tools, which needs the
        # optional `mcp` package; plain function tools never need it.
        params["_skip_mcp_handler"] = True
    response = litellm.completion(model=model, messages=messages, num_retries=0, **params)
    u = getattr(response, "usage", None)
    usage = Usage(getattr(u, "prompt_tokens", 0) or 0, getattr(u, "completion_tokens", 0) or 0, 1)
    message = cast("ModelResponse", response).choices[0].message  # not streamed: a whole response
    return message.content or "", [call.model_dump() for call in getattr(message, "tool_calls", None) or []], usage


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
    `params` are OpenAI chat parameters sent as they are, e.g. `tools=[{"type": "function", ...}]`
    for native tool calls; `timeout` (seconds) bounds the wait. Raises LLMError when the gateway
    refuses or fails the call.
    """
    extra = dict(params)
    if schema is not None and needs_constrained_decoding(model):
        extra["response_format"] = {"type": "json_object", "schema": schema}
    if temperature is not None:
        extra["temperature"] = temperature
    if max_tokens is not None:
        extra["max_tokens"] = max_tokens
    url = os.environ.get("AGENT_GATEWAY_URL")
    usage = Usage()
    text, tool_calls = "", []
    for _ in range(MAX_ATTEMPTS):
        if url:
            text, tool_calls, used = _through_gateway(url, model, messages, dict(extra))
        else:
            text, tool_calls, used = _to_provider(model, messages, dict(extra))
        usage.add(used)
        if text.strip() or tool_calls:
            break
    return LLMReply(text, usage, tool_calls)
