"""The host's way to model providers: a small protocol (base.py) and litellm's implementation of it.

    base.py              Provider, and the plain data it answers with: Route, Answer, Usage, Failure
    litellm_provider.py  LiteLLM, the one module of the trusted core that imports litellm; LITELLM, the
                         instance the program uses
"""

from services.provider.base import Answer, Failure, Provider, Route, Setup, Usage
from services.provider.litellm_provider import LITELLM, LiteLLM

__all__ = ["LITELLM", "Answer", "Failure", "LiteLLM", "Provider", "Route", "Setup", "Usage"]
