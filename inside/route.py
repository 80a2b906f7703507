"""Unmodified litellm calls reach the run's gateway, not the provider they name.

Agent code written for providers (an agent folder such as the HyperAgents reference's calls
`litellm.completion(model="openai/o4-mini", ...)` with no base URL) has no network in a
sandbox. Here its calls go to the gateway instead, as litellm's provider for an
OpenAI-compatible server (`hosted_vllm/<model>`) with the session's key, so the gateway
receives the model name the agent asked for, checks it against the session like any call
and books it. A call that names a server of its own (`api_base` or `base_url`) is left as it
is: nothing but the loopback and the gateway can be reached from a sandbox anyway. Nothing
here is a barrier: code that undoes
it only loses its calls, since the sandbox has no other way out.

The trusted scripts never import litellm themselves (seconds of CPU and about 200 MB per
process, for agents that mostly do not use it): `route_on_import` wraps it right after agent
code imports it, at load time or lazily in the middle of a row.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys

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


def _positional(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """completion(model, messages, ...) called by position, as keywords."""
    if not args:
        return args, kwargs
    return args[2:], {"model": args[0], **({"messages": args[1]} if len(args) > 1 else {}), **kwargs}


def route_to_gateway(litellm) -> None:
    """Wrap litellm's completion and acompletion (once: a module reloaded is wrapped again) so every
    call goes through `to_gateway`."""
    if getattr(litellm.completion, "routed_to_gateway", False):
        return

    def wrap(call):
        @functools.wraps(call)
        def routed(*args, **kwargs):
            args, kwargs = _positional(args, kwargs)
            return call(*args, **to_gateway(kwargs))
        routed.routed_to_gateway = True  # pyright: ignore[reportAttributeAccessIssue] - a mark on the wrapper
        return routed

    def wrap_async(call):
        @functools.wraps(call)
        async def routed(*args, **kwargs):
            args, kwargs = _positional(args, kwargs)
            return await call(*args, **to_gateway(kwargs))
        return routed

    litellm.completion = wrap(litellm.completion)
    litellm.acompletion = wrap_async(litellm.acompletion)


class _OnImport(importlib.abc.MetaPathFinder):
    """Runs each of `patches` on litellm once its module's code ran, whoever imports it and when."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path=None, target=None):
        if name != "litellm":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)  # not through sys.meta_path: no recursion
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if hasattr(module, "completion"):  # not a module of the workspace's that took the name
                for patch in self.patches:
                    patch(module)

        spec.loader.exec_module = exec_module  # this spec's own loader object: nothing else sees it
        return spec


def route_on_import(*more) -> None:
    """Route litellm's calls to the gateway, then apply each of `more` (functions of the litellm module),
    as soon as anything imports it; at once if it is imported already."""
    patches = (route_to_gateway, *more)
    if "litellm" in sys.modules:
        for patch in patches:
            patch(sys.modules["litellm"])
        return
    sys.meta_path.insert(0, _OnImport(patches))
