"""litellm as the host's provider: the one module of the trusted core that imports it.

litellm knows every provider's API, names, keys and price table; everything the host needs of it
(a call, what a response used, what an exception means, a model's prices and keys, its first-call
set-up) is a method here, in the terms of base.py. The rest of the host never sees a litellm type,
so a change of litellm's, or another library in its place, is one module's business. Sandboxed
code does not come here: inside/route.py wraps an agent's own litellm inside its sandbox.

Importing litellm takes seconds, so it is imported on first use (`load`).
"""

from __future__ import annotations

import threading
from functools import cache

from inside.warm_up import warm_up
from services.errors import UserError
from services.provider.base import Answer, Failure, Route, Setup, Usage

# How litellm reports what cannot be reached: some providers' connection errors come as a 500 with these words.
_UNREACHABLE_WORDS = ("connection error", "connection refused", "name or service not known", "timed out")


@cache
def _litellm():  # noqa: ANN202 - the module: pyright reads its functions' types, ModuleType hides them
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


def usage_of(payload: dict, hidden: dict) -> Usage:
    """What a response used: its tokens, the cost litellm priced it at (in `hidden`, its `_hidden_params`),
    and its prompt tokens read from and written to the provider's prompt cache."""
    usage = payload.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    # litellm puts every provider's cache counts where OpenAI reports them (prompt_tokens_details), and
    # Anthropic's also under Anthropic's own names.
    return Usage(prompt_tokens=int(usage.get("prompt_tokens") or 0),
                 completion_tokens=int(usage.get("completion_tokens") or 0),
                 cost_usd=float(hidden.get("response_cost") or 0.0),
                 cached_tokens=_count(details.get("cached_tokens")) or _count(usage.get("cache_read_input_tokens")),
                 cache_write_tokens=_count(details.get("cache_creation_tokens"))
                 or _count(usage.get("cache_creation_input_tokens")))


class LiteLLM:
    """The Provider (base.py) the program uses."""

    @staticmethod
    def load() -> None:
        """Import litellm now (seconds): an entry point starts this in a thread while it does other work."""
        _litellm()

    def complete(self, route: Route, messages: list, params: dict, timeout: float | None) -> Answer:
        lit = _litellm()
        if params.get("tools"):
            # Plain function tools: without this litellm imports its MCP support (the optional `mcp`
            # package) to inspect them. It is not sent to the provider.
            params = {**params, "_skip_mcp_handler": True}
        given = (("api_base", route.api_base), ("api_key", route.api_key), ("timeout", timeout))
        response = lit.completion(model=route.model, messages=messages, num_retries=0, drop_params=True,
                                  **{k: v for k, v in given if v is not None}, **params)
        if not isinstance(response, lit.ModelResponse):  # a stream or a coroutine: no caller asks for either
            raise TypeError(f"litellm answered a {type(response).__name__}, not a ModelResponse")
        payload = response.model_dump(mode="json")
        return Answer(payload, usage_of(payload, getattr(response, "_hidden_params", None) or {}))

    def failure(self, error: Exception) -> Failure:
        lit = _litellm()
        status = getattr(error, "status_code", None)
        status = status if isinstance(status, int) else None
        retry = isinstance(error, (lit.RateLimitError, lit.InternalServerError, lit.ServiceUnavailableError,
                                   lit.APIConnectionError, lit.Timeout, lit.BadGatewayError)) or (
            status is not None and (status == 429 or status >= 500))
        refused = isinstance(error, (lit.AuthenticationError, lit.PermissionDeniedError))
        unknown = isinstance(error, lit.NotFoundError)
        # UserError: a local model's server that cannot start. A 4xx left is the request's own fault.
        fault = retry or refused or unknown or isinstance(error, UserError) or not (
            status is not None and 400 <= status < 500)
        return Failure(retry, fault, status if status is not None and 400 <= status < 600 else 502,
                       self._setup(error, refused, unknown))

    @staticmethod
    def _setup(error: Exception, refused: bool, unknown: bool) -> Setup | None:
        lit = _litellm()
        if isinstance(error, (lit.APIConnectionError, lit.Timeout)) or any(
                w in str(error).lower() for w in _UNREACHABLE_WORDS):
            return Setup.UNREACHABLE
        if refused:
            return Setup.KEY_REFUSED
        return Setup.UNKNOWN_MODEL if unknown else None

    def family(self, model: str) -> str:
        try:
            return _litellm().get_llm_provider(model)[1]
        except Exception:
            raise UserError(
                f"model {model!r} is unknown to litellm: write it as provider/name, e.g. openai/o4-mini, "
                "anthropic/claude-sonnet-4-5, hosted_vllm/NAME"
            ) from None

    def missing_keys(self, model: str) -> list[str]:
        status = _litellm().validate_environment(model)
        if status.get("keys_in_environment"):
            return []
        return list(status.get("missing_keys") or [f"{self.family(model).upper()}_API_KEY"])

    def prices(self, model: str) -> tuple[bool, dict]:
        """As base.py says; where get_model_info misses `model`, its table's entry under the name with or
        without its provider prefix (litellm resolves some providers' names only so)."""
        lit = _litellm()
        try:
            return True, dict(lit.get_model_info(model))
        except Exception:
            entry = lit.model_cost.get(model) or lit.model_cost.get(model.split("/", 1)[-1]) or {}
            return False, dict(entry)

    def register_prices(self, model: str, rates: dict) -> None:
        _litellm().register_model({model: {**rates, "litellm_provider": self.family(model), "mode": "chat"}})

    def warm_up(self, families: list[str]) -> threading.Thread | None:
        if not families:
            return None
        # Imported here, not on the thread: a thread still importing litellm's modules when the interpreter
        # exits would hold their import locks, and litellm's finalizers, importing at exit, would wait on them.
        thread = threading.Thread(target=warm_up, args=(_litellm(), families), name="gateway-warm-up", daemon=True)
        thread.start()
        return thread


LITELLM = LiteLLM()  # the program's provider; it imports litellm on its first use
