"""One model call, with the settings of the reference's `get_response_from_llm` (agent/llm.py).

Reproduced: temperature 0 and an output limit of 16384 tokens, with the reference's rules by model
name: `openai/gpt-5` and `openai/gpt-5-mini` accept only their default temperature, so they get
none; any model whose name contains "gpt-5" gets the limit as `max_completion_tokens`; a name
containing "claude-3-haiku" gets at most 4096 tokens; every other model gets `max_tokens`.
Parameters a provider does not take are dropped, as the reference sets litellm to: inside a run by
the run's gateway (it calls litellm with drop_params), outside by litellm here. Messages are kept
as {"role", "text"}, the reference's shape, and sent as {"role", "content"}.

Different: no `backoff` retry around the call (the reference retries only on `requests` and JSON
errors, which litellm does not raise; inside a run the gateway retries provider errors). Inside a
run, where the sandbox's only way out is the run's gateway (AGENT_GATEWAY_URL), the call is one
HTTP request to that OpenAI-compatible endpoint with the model's full name, made with the standard
library: litellm's import would cost every sandboxed process seconds of CPU. Outside a run it goes
straight to the provider with litellm, as in the reference. A reply without text counts as an
empty reply (the reference would fail on it). Each call through the gateway raises the audit event
"agent.llm.usage" (tokens, cost), which the run's evaluation counts per row.
"""

import http.client
import json
import os
import sys
import urllib.parse

MAX_TOKENS = 16384
TEMPERATURE = 0.0
DEFAULT_TEMPERATURE_ONLY = ("openai/gpt-5", "openai/gpt-5-mini")
SMALL_OUTPUT = ("claude-3-haiku", 4096)  # a name part and the most output tokens such a model gives
TIMEOUT_S = 1800.0  # one call at the gateway, which has its own provider timeout and retries


class GatewayError(Exception):
    """A call the run's gateway refused or failed; `status_code` is its HTTP status (None: not reached)."""

    def __init__(self, message, status_code=None):
        super().__init__(message)
        self.status_code = status_code


def sampling_params(model, temperature=TEMPERATURE, max_tokens=MAX_TOKENS):
    """The temperature and output limit to send for `model`, by the reference's rules."""
    params = {}
    if model not in DEFAULT_TEMPERATURE_ONLY:
        params["temperature"] = temperature
    if "gpt-5" in model:
        params["max_completion_tokens"] = max_tokens
    elif SMALL_OUTPUT[0] in model:
        params["max_tokens"] = min(max_tokens, SMALL_OUTPUT[1])
    else:
        params["max_tokens"] = max_tokens
    return params


def gateway_completion(url, body):
    """POST `body` to the OpenAI-compatible gateway at `url`; the reply's text."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
    headers = {"Content-Type": "application/json",
               "Authorization": f"Bearer {os.environ.get('AGENT_GATEWAY_KEY', '')}"}
    try:
        conn.request("POST", parts.path.rstrip("/") + "/chat/completions", json.dumps(body).encode(), headers)
        response = conn.getresponse()
        data = response.read()
    except TimeoutError:
        raise GatewayError(f"the gateway gave no answer within {TIMEOUT_S:g} s") from None
    except (OSError, http.client.HTTPException) as e:
        raise GatewayError(f"cannot reach the gateway at {url}: {type(e).__name__}: {e}") from None
    finally:
        conn.close()
    try:
        reply = json.loads(data)
    except ValueError:
        reply = None
    if response.status != 200 or not isinstance(reply, dict):
        error = reply.get("error") if isinstance(reply, dict) else None
        message = error.get("message") if isinstance(error, dict) else data[:500].decode("utf-8", "replace")
        raise GatewayError(f"the gateway answered {response.status}: {message}", response.status)
    usage = reply.get("usage") or {}
    sys.audit("agent.llm.usage", usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0,
              response.getheader("x-gateway-cost-usd") or 0)
    return reply["choices"][0]["message"].get("content") or ""


def provider_completion(model, messages, params):
    """The reply's text from the provider litellm knows `model` by (outside a run)."""
    # litellm otherwise downloads its price list at import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.drop_params = True
    litellm.suppress_debug_info = True
    response = litellm.completion(model=model, messages=messages, **params)
    return response.choices[0].message.content or ""


def get_response_from_llm(msg, model, temperature=TEMPERATURE, max_tokens=MAX_TOKENS, msg_history=None):
    """Send `msg` as the next user message after `msg_history`; return (reply text, history with both)."""
    history = list(msg_history or []) + [{"role": "user", "text": msg}]
    # A message may also come in litellm's own shape, as the reference accepts.
    messages = [{"role": m["role"], "content": m["text"] if "text" in m else m.get("content")} for m in history]
    params = sampling_params(model, temperature, max_tokens)
    url = os.environ.get("AGENT_GATEWAY_URL")
    if url:
        text = gateway_completion(url, {"model": model, "messages": messages, **params})
    else:
        text = provider_completion(model, messages, params)
    return text, history + [{"role": "assistant", "text": text}]
