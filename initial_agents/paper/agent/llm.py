"""One model call, with the settings of the reference's `get_response_from_llm` (agent/llm.py).

Reproduced: temperature 0 and an output limit of 16384 tokens, with the reference's rules by model
name: `openai/gpt-5` and `openai/gpt-5-mini` accept only their default temperature, so they get
none; any model whose name contains "gpt-5" gets the limit as `max_completion_tokens`; a name
containing "claude-3-haiku" gets at most 4096 tokens; every other model gets `max_tokens`.
litellm drops parameters a provider does not take, as the reference sets it to. Messages are kept
as {"role", "text"}, the reference's shape, and given to litellm as {"role", "content"}.

Different: no `backoff` retry around the call (the reference retries only on `requests` and JSON
errors, which litellm does not raise; inside a run the gateway retries provider errors). Inside a
run, where the sandbox's only way out is the run's gateway (AGENT_GATEWAY_URL), the call goes there
with the model's full name; outside a run it goes straight to the provider, as in the reference.
A reply without text counts as an empty reply (the reference would fail on it).
"""

import os

# litellm otherwise downloads its price list at import, which a sandbox without network waits on.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

litellm.drop_params = True
litellm.suppress_debug_info = True

MAX_TOKENS = 16384
TEMPERATURE = 0.0
DEFAULT_TEMPERATURE_ONLY = ("openai/gpt-5", "openai/gpt-5-mini")
SMALL_OUTPUT = ("claude-3-haiku", 4096)  # a name part and the most output tokens such a model gives


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


def _route(model):
    """Where the call goes: the run's gateway when there is one, else the provider litellm knows."""
    url = os.environ.get("AGENT_GATEWAY_URL")
    if not url:
        return {"model": model}
    # The gateway is OpenAI-compatible and resolves the full name ("anthropic/..."), which this
    # litellm route sends unchanged; "openai/..." would cut the provider part off.
    return {"model": f"hosted_vllm/{model}", "api_base": url, "api_key": os.environ.get("AGENT_GATEWAY_KEY", "")}


def get_response_from_llm(msg, model, temperature=TEMPERATURE, max_tokens=MAX_TOKENS, msg_history=None):
    """Send `msg` as the next user message after `msg_history`; return (reply text, history with both)."""
    history = list(msg_history or []) + [{"role": "user", "text": msg}]
    # A message may also come in litellm's own shape, as the reference accepts.
    messages = [{"role": m["role"], "content": m["text"] if "text" in m else m.get("content")} for m in history]
    response = litellm.completion(messages=messages, **_route(model),
                                  **sampling_params(model, temperature, max_tokens))
    text = response.choices[0].message.content or ""
    return text, history + [{"role": "assistant", "text": text}]
