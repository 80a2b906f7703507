"""Unmodified litellm calls reach the run's gateway, not the provider they name.

Agent code written for providers (an agent folder such as the HyperAgents reference's calls
`litellm.completion(model="openai/o4-mini", ...)` with no base URL) has no network in a
sandbox. Here its calls go to the gateway instead, as litellm's provider for an
OpenAI-compatible server (`hosted_vllm/<model>`) with the session's key, so the gateway
receives the model name the agent asked for, checks it against the session like any call
and books it. A call that names a server of its own (agent/llm.py names the gateway; the
warm-up, a stub on the sandbox's loopback) is left as it is: nothing but the loopback and
the gateway can be reached from a sandbox anyway. Nothing here is a barrier: code that undoes
it only loses its calls, since the sandbox has no other way out.
"""

from __future__ import annotations

import functools
import os

GATEWAY_PROVIDER = "hosted_vllm"
_TARGET_KEYS = ("api_base", "base_url", "api_key", "custom_llm_provider")


def to_gateway(kwargs: dict) -> dict:
    """The arguments of one completion call, sent to the gateway of this sandbox's environment."""
    url = os.environ.get("AGENT_GATEWAY_URL")
    if not url or kwargs.get("api_base") or kwargs.get("base_url"):
        return kwargs
    model = str(kwargs.get("model") or "")
    routed = {k: v for k, v in kwargs.items() if k not in _TARGET_KEYS}
    prefix = f"{GATEWAY_PROVIDER}/"
    routed.update(model=model if model.startswith(prefix) else prefix + model, api_base=url,
                  api_key=os.environ.get("AGENT_GATEWAY_KEY", ""))
    return routed


def route_to_gateway(litellm) -> None:
    """Wrap litellm's completion and acompletion (once) so every call goes through `to_gateway`."""
    if getattr(litellm, "_routed_to_gateway", False):
        return

    def wrap(call):
        @functools.wraps(call)
        def routed(*args, **kwargs):
            if args:  # completion(model, messages, ...) by position
                kwargs = {"model": args[0], **({"messages": args[1]} if len(args) > 1 else {}), **kwargs}
                args = args[2:]
            return call(*args, **to_gateway(kwargs))
        return routed

    def wrap_async(call):
        @functools.wraps(call)
        async def routed(*args, **kwargs):
            if args:
                kwargs = {"model": args[0], **({"messages": args[1]} if len(args) > 1 else {}), **kwargs}
                args = args[2:]
            return await call(*args, **to_gateway(kwargs))
        return routed

    litellm.completion = wrap(litellm.completion)
    litellm.acompletion = wrap_async(litellm.acompletion)
    litellm._routed_to_gateway = True
