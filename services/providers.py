"""Provider keys: where they come from, whether a model has what it needs, keeping them out of text.

Keys live only in the trusted process (environment or a `.env` file). Everything that
leaves it (ledger rows, logs, error messages returned to sandboxed code) goes
through `redact` first. Which provider a model goes to, and which keys it needs, is the
provider's to say (services/provider/, litellm's table).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from services.errors import UserError
from services.local_model import is_local, weights_path
from services.provider import LITELLM

if TYPE_CHECKING:
    from services.config import ModelsConfig

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


def provider_of(model: str) -> str:
    """The litellm provider of `model`; UserError when litellm does not know the model."""
    return "local" if is_local(model) else LITELLM.family(model)


def check_credentials(model: str) -> None:
    """UserError naming the missing variable when `model` cannot be called from here.

    A provider whose base URL is set (a local or self-hosted OpenAI-compatible server)
    is allowed without a key, since such servers often need none.
    """
    if is_local(model):
        weights_path(model)
        return
    provider = provider_of(model)
    missing = LITELLM.missing_keys(model)
    if not missing:
        return
    if os.environ.get(f"{provider.upper()}_API_BASE") or os.environ.get(f"{provider.upper()}_BASE_URL"):
        return
    raise UserError(f"missing API key for model {model}: set {' or '.join(missing)} in the environment or in .env")


LOCAL_DEFAULT = "local/smollm2-135m"
# What `auto` models mean: the first row whose keys are all set wins; none set -> LOCAL_DEFAULT.
AUTO_MODELS: tuple[tuple[tuple[str, ...], str, dict[str, str]], ...] = (
    (("OPENAI_API_KEY", "ANTHROPIC_API_KEY"), "the HyperAgents paper's setup",
     {"task": "openai/o4-mini", "meta": "anthropic/claude-sonnet-4-5", "grader": "openai/o4-mini",
      "judge": "openai/o4-mini"}),
    (("OPENAI_API_KEY",), "OpenAI only", dict.fromkeys(("task", "meta", "grader", "judge"), "openai/o4-mini")),
    (("ANTHROPIC_API_KEY",), "Anthropic only",
     dict.fromkeys(("task", "meta", "grader", "judge"), "anthropic/claude-sonnet-4-5")),
    (("GEMINI_API_KEY",), "Gemini only", dict.fromkeys(("task", "meta", "grader", "judge"), "gemini/gemini-2.5-pro")),
)


def choose_models(models: ModelsConfig) -> str | None:
    """Fill every role of `models` (a ModelsConfig) set to "auto"; returns why those models
    (one sentence), or None when every role was configured."""
    auto = [role for role, value in vars(models).items() if value == "auto"]
    if not auto:
        return None
    for keys, setup, table in AUTO_MODELS:
        if all(os.environ.get(k) for k in keys):
            for role in auto:
                setattr(models, role, table[role])
            return f"{' and '.join(keys)} {'is' if len(keys) == 1 else 'are'} set: {setup}"
    for role in auto:
        setattr(models, role, LOCAL_DEFAULT)
    names = ", ".join(sorted({k for keys, _, _ in AUTO_MODELS for k in keys}))
    return (f"no provider key is set ({names}): the bundled local model runs on this CPU with no key; "
            "its answers are near chance, so use it to try the tool, not for results")
