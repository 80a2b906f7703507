"""Typed configuration loaded from YAML: every field has a default and a one-line reason.

`load_config(path)` starts from `configs/default.yaml`, then applies the user's file;
command-line flags override the result field by field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from optimizer.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = PROJECT_ROOT / "configs" / "default.yaml"
PRESETS_DIR = PROJECT_ROOT / "configs" / "presets"


@dataclass
class ModelsConfig:
    # "auto": the first provider whose key is set, else the local model (optimizer/providers.py)
    task: str = "auto"  # model of the task agent; role alias "task"
    meta: str = "auto"  # model of the meta agent; role alias "meta"
    grader: str = "auto"  # model of the proof grader; role alias "grader"
    judge: str = "auto"  # model of LLM judges in answer domains; role alias "judge"


@dataclass
class GatewayConfig:
    host: str = "127.0.0.1"  # loopback only: the gateway holds the provider keys
    port: int = 0  # 0 = any free port, chosen per run
    max_retries: int = 5  # retries of transient provider errors (429, 5xx, timeouts)
    backoff_base_s: float = 1.0  # first retry delay; doubles each time, with full jitter
    backoff_max_s: float = 30.0  # cap of one retry delay
    request_timeout_s: float = 900.0  # one provider call; reasoning models can be slow
    cache: str = "temperature0"  # temperature0 | all | off: which identical requests are replayed
    budget_usd: float | None = None  # stop new calls once this much is spent (None = no limit)
    budget_tokens: int | None = None  # stop new calls once this many tokens are spent
    max_concurrent_calls: int | None = None  # provider calls in flight at once, over all models (None = no limit)
    requests_per_minute: int | None = None  # provider calls started per minute and model, retries too (None = no limit)
    local_context: int = 2048  # tokens of context a local model is served with; prompt runs at ~300 tokens/s on 2 cores
    local_threads: int = 0  # CPU threads of the local model server (0 = half the cores)
    prices: dict = field(default_factory=dict)  # model -> [usd per 1M input, per 1M output] for models litellm has no price for


@dataclass
class HarnessConfig:
    num_workers: int = 5  # rows evaluated in parallel (threads in one worker process)
    save_interval: int = 100  # rewrite predictions.csv every N finished rows (the journal is written at once)
    row_timeout_s: float = 1800.0  # a row still running after this is recorded as an error
    start_timeout_s: float = 300.0  # a worker that has not loaded the agent by then is killed
    data_files: dict = field(default_factory=dict)  # domain -> data file, for domains not bundled (amo_bench)


@dataclass
class SandboxConfig:
    backend: str = "auto"  # auto | docker | bwrap | none; auto = docker if an engine answers, else bwrap
    memory_mb: int = 4096  # address space (bwrap) / memory limit (docker) of agent code
    pids: int = 256  # processes and threads at once: a fork bomb stops here
    cpus: float = 2.0  # CPU cores a docker container may use
    cpu_seconds: int = 7200  # CPU time of one sandboxed process before the kernel kills it
    file_size_mb: int = 1024  # largest file agent code may write
    tmp_mb: int = 512  # size of the private /tmp
    output_cap_mb: float = 16  # stdout+stderr kept from one command; a command printing more is killed
    docker_image: str = "hyperagents-sandbox:latest"  # built by `python -m optimizer.sandbox build-image`
    docker_host: str | None = None  # engine address (default: DOCKER_HOST or the local socket)


@dataclass
class LoopConfig:
    max_generation: int = 10  # generations after the initial node
    parent_selection: str = "score_child_prop"  # random | latest | best | score_prop | score_child_prop
    seed: int | None = None  # seeds parent selection, so a run can be replayed
    eval_samples: int = -1  # rows of each full evaluation split (-1 = all)
    skip_staged_eval: bool = False  # go straight to the full evaluation
    eval_test: bool = False  # also evaluate the test split (reported, never used for selection)
    edit_select_parent: bool = False  # the workspace's select_next_parent.py chooses parents
    run_baseline: str | None = None  # no_selfimprove (meta agent frozen) | no_archive (always the latest node)
    initial_agent: str = "default"  # the task agent of node `initial` (optimizer/initial_agents.py)
    meta_timeout_s: float = 3600.0  # wall clock of one meta agent run
    meta_max_calls: int = 40  # model calls (one tool call each) of one meta agent run, enforced by the gateway
    selector_timeout_s: float = 120.0  # one run of the agent's own select_next_parent.py


@dataclass
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)

    def resolve_model(self, name: str) -> str:
        """A role alias (task, meta, grader, judge) to its model string; anything else unchanged."""
        return getattr(self.models, name) if name in ROLE_ALIASES else name


SANDBOX_BACKENDS = ("auto", "docker", "bwrap", "none")
BASELINES = ("no_selfimprove", "no_archive")
ROLE_ALIASES = tuple(f.name for f in dataclasses.fields(ModelsConfig))


def _merge(obj, data: dict, where: str):
    if not isinstance(data, dict):
        raise UserError(f"config section {where or 'top level'} must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        if key not in known:
            raise UserError(f"unknown config key {where + '.' if where else ''}{key} (known: {', '.join(known)})")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            _merge(current, value or {}, f"{where + '.' if where else ''}{key}")
        else:
            setattr(obj, key, value)
    return obj


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text()
    except OSError as e:
        raise UserError(f"cannot read config {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"config {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    return data or {}


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_config(path: str | Path | None = None, preset: str | None = None) -> Config:
    """configs/default.yaml, then the preset's file (configs/presets/NAME.yaml), then `path`."""
    config = Config()
    if DEFAULT_CONFIG.is_file():  # absent in a non-editable install: the dataclass defaults apply
        config = _merge(config, _read_yaml(DEFAULT_CONFIG), "")
    if preset:
        if preset not in preset_names():
            raise UserError(f"unknown preset {preset!r} (known: {', '.join(preset_names()) or 'none'})")
        config = _merge(config, _read_yaml(PRESETS_DIR / f"{preset}.yaml"), "")
    if path:
        config = _merge(config, _read_yaml(Path(path)), "")
    if config.gateway.cache not in ("temperature0", "all", "off"):
        raise UserError(f"gateway.cache must be temperature0, all or off, got {config.gateway.cache!r}")
    for key in ("max_concurrent_calls", "requests_per_minute"):
        value = getattr(config.gateway, key)
        if value is not None and (type(value) is not int or value < 1):
            raise UserError(f"gateway.{key} must be a positive integer or null, got {value!r}")
    from archive.selection import STRATEGIES

    if config.loop.parent_selection not in STRATEGIES:
        raise UserError(f"loop.parent_selection must be one of {', '.join(STRATEGIES)}, "
                        f"got {config.loop.parent_selection!r}")
    if config.loop.run_baseline not in (None, *BASELINES):
        raise UserError(f"loop.run_baseline must be one of {', '.join(BASELINES)}, got {config.loop.run_baseline!r}")
    if config.sandbox.backend not in SANDBOX_BACKENDS:
        raise UserError(f"sandbox.backend must be one of {', '.join(SANDBOX_BACKENDS)}, got {config.sandbox.backend!r}")
    return config


def parse_data_flags(values: list[str] | None) -> dict[str, str]:
    """`--data DOMAIN=PATH` flags as {domain: absolute path}."""
    files = {}
    for value in values or []:
        domain, sep, path = value.partition("=")
        if not sep or not domain or not path:
            raise UserError(f"--data {value}: expected DOMAIN=PATH, e.g. --data amo_bench=AMO-Bench.jsonl")
        files[domain] = str(Path(path).expanduser().resolve())
    return files
