"""Provider keys: where they come from, whether a model has what it needs, keeping them out of text.

Keys live only in the trusted process (environment or a `.env` file). Everything that
leaves it (ledger rows, logs, error messages returned to sandboxed code) goes
through `redact` first.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from optimizer.errors import UserError

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)


def load_dotenv_file(path: str | Path = ".env") -> None:
    """Read KEY=VALUE lines from `path` into the environment; variables already set win."""
    path = Path(path)
    if not path.is_file():
        return
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.removeprefix("export ").split("=", 1)
        os.environ.setdefault(key.strip(), value.strip().strip("'\""))


def _secret_values() -> list[str]:
    return sorted(
        (v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8),
        key=len,
        reverse=True,
    )


def redact(text: str) -> str:
    """`text` with the value of every secret-looking environment variable replaced by ***."""
    for value in _secret_values():
        text = text.replace(value, "***")
    return text


@lru_cache(maxsize=None)
def _litellm():
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def provider_of(model: str) -> str:
    """The litellm provider of `model`; UserError when litellm does not know the model."""
    try:
        return _litellm().get_llm_provider(model)[1]
    except Exception:
        raise UserError(
            f"model {model!r} is unknown to litellm: write it as provider/name, e.g. openai/o4-mini, "
            "anthropic/claude-sonnet-4-5, hosted_vllm/NAME"
        ) from None


def check_credentials(model: str) -> None:
    """UserError naming the missing variable when `model` cannot be called from here.

    A provider whose base URL is set (a local or self-hosted OpenAI-compatible server)
    is allowed without a key, since such servers often need none.
    """
    provider = provider_of(model)
    status = _litellm().validate_environment(model)
    if status.get("keys_in_environment"):
        return
    if os.environ.get(f"{provider.upper()}_API_BASE") or os.environ.get(f"{provider.upper()}_BASE_URL"):
        return
    missing = " or ".join(status.get("missing_keys") or [f"{provider.upper()}_API_KEY"])
    raise UserError(f"missing API key for model {model}: set {missing} in the environment or in .env")
