"""Typed configuration loaded from YAML: every field has a default and a one-line reason.

`load_config(path)` starts from `configs/default.yaml`, then applies the user's file; `services.flags.apply_settings`
applies `--set SECTION.KEY=VALUE` flags to the result, and the specific command-line flags override it field by
field last. `validate(config)` checks every field against its annotation and `_rules()` (the shapes of values:
services/config_values.py); each way a config is made ends with it."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from services import choices
from services.config_sections import (
    GatewayConfig,
    HarnessConfig,
    LoopConfig,
    ModelsConfig,
    SandboxConfig,
    TrackingConfig,
)
from services.config_values import (
    DOCKER_IMAGE,
    LIMIT_RULES,
    META_MODELS,
    PRICES,
    TRACKING_RULES,
    above_up_to,
    bad_text,
    between,
    count,
    has_port,
    is_host,
    is_model,
    one_of,
    stages,
    uri,
)
from services.errors import UserError
from services.meta_agent_names import meta_agent_names
from services.plain_data import conforms, describe, show
from services.strategy_names import CONFIG_KEYS, strategy_names
from services.user_files import expand_user, read_yaml

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = PROJECT_ROOT / "configs" / "default.yaml"
PRESETS_DIR = PROJECT_ROOT / "configs" / "presets"
SPEC_SUFFIXES = (".yaml", ".yml")  # an entry of loop.domains ending so names a spec file, not a domain


@dataclass
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    search: dict = field(default_factory=dict)  # a search strategy's own settings, by its name: {islands: {islands: 4, migrate_every: 10}}; each strategy's are listed in docs/strategies.md and checked before a run starts

    def resolve_model(self, name: str) -> str:
        """A role alias (task, meta, grader, judge, heldout_grader) to its model string (the first of a
        list of meta models), through roles that name another role (heldout_grader: grader); anything
        else unchanged. UserError for a role left unset (heldout_grader) or roles that name each other."""
        seen: list[str] = []
        while name in ROLE_ALIASES:
            if name in seen:
                raise UserError(f"models.{seen[0]} names roles in a circle: {' -> '.join([*seen, name])}")
            seen.append(name)
            model = getattr(self.models, name)
            if model is None:
                raise UserError(f"models.{name} is not set")
            name = model[0] if isinstance(model, list) else model
        return name

    def meta_models(self) -> list[str]:
        """The models the meta agent's bandit chooses from: models.meta's list, or its one model."""
        meta = self.models.meta
        return list(meta) if isinstance(meta, list) else [self.resolve_model("meta")]

    def to_dict(self) -> dict:
        """Plain data (JSON and YAML can hold it) that `from_dict` turns back into an equal config."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Config:
        """A validated config from a saved dict (run.json's "config"); fields it lacks keep their defaults.
        A run saved before `loop.eval_test` became `loop.final_test` still resumes (without the test split)."""
        if isinstance(data, dict) and isinstance(data.get("loop"), dict) and "eval_test" in data["loop"]:
            data = {**data, "loop": {k: v for k, v in data["loop"].items() if k != "eval_test"}}
        return validate(_merge(cls(), data, ""))


SANDBOX_BACKENDS = ("auto", "docker", "bwrap", "none")  # auto, then services.sandbox.backends.LOCAL_BACKENDS
CACHE_MODES = ("temperature0", "all", "off")  # services.gateway.caching.REPLAYS
EXECUTORS = ("local", "ray")
class Baseline(StrEnum):
    """The paper's baselines (loop.run_baseline)."""

    NO_SELFIMPROVE = "no_selfimprove"  # the meta agent runs from the initial code, frozen
    NO_ARCHIVE = "no_archive"  # every generation starts from the latest node


BASELINES = tuple(Baseline)
ROLE_ALIASES = tuple(f.name for f in dataclasses.fields(ModelsConfig))


_Section = typing.TypeVar("_Section", bound="DataclassInstance")


# Keys that became a strategy's own settings: loop.KEY -> the (strategy, its setting) pairs it set. A config, a
# --set or a run's run.json that names one still works: the value moves to `search` (a run saved before the move
# resumes); promotion_test was the test of both paired rules.
MOVED: dict[str, tuple[tuple[str, str], ...]] = {
    "islands": (("islands", "islands"),), "migrate_every": (("islands", "migrate_every"),),
    "promotion_level": (("not_worse_than_parent", "level"),),
    "promotion_test": (("not_worse_than_parent", "test"), ("paired", "test")),
    "best_level": (("paired", "level"),)}


def _moved(data: dict) -> dict:
    """`data` (a config mapping) with MOVED's loop keys under `search`."""
    loop = data.get("loop")
    if not isinstance(loop, dict) or not MOVED.keys() & loop.keys():
        return data
    search = data.get("search") or {}
    if isinstance(search, dict):  # else left as it is, for the validation to refuse its shape
        search = dict(search)
        for key in sorted(MOVED.keys() & loop.keys()):
            for strategy, name in MOVED[key]:
                section = search.get(strategy) or {}
                if isinstance(section, dict):
                    if name in section and section[name] != loop[key]:  # one mapping giving both: which wins?
                        raise UserError(f"loop.{key} and search.{strategy}.{name} are one setting given twice "
                                        f"({show(loop[key])}, {show(section[name])}): keep search.{strategy}.{name}")
                    search[strategy] = {**section, name: loop[key]}
    return {**data, "loop": {k: v for k, v in loop.items() if k not in MOVED}, "search": search}


def _merge(obj: _Section, data: object, where: str) -> _Section:
    if not where and isinstance(data, dict):
        data = _moved(data)
    if not isinstance(data, dict):
        raise UserError(f"config section {where or 'top level'} must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        if key not in known:
            name = key if isinstance(key, str) and key.isidentifier() else show(key)
            raise UserError(f"unknown config key {where + '.' if where else ''}{name} (known: {', '.join(known)})")
        current = getattr(obj, key)
        if key == "search" and not where and isinstance(value, dict) and isinstance(current, dict):
            # One strategy's settings given are merged into what the config has for it, not put in place of all.
            value = {**current, **{k: ({**current[k], **v} if isinstance(current.get(k), dict) and isinstance(v, dict)
                                       else v) for k, v in value.items()}}
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            _merge(current, {} if value is None else value, f"{where + '.' if where else ''}{key}")
        else:
            setattr(obj, key, value)
    return obj


MAX_TEXT = 4096  # characters of any text in a config (a path, a name, an address)
SEED_LIMIT = 2**63  # seeds are below this, so a group's seeds and what is derived from them stay small numbers


def _rules() -> dict:
    """Value rules beyond the type, by dotted key: (test, what is expected). A null where allowed passes.
    Every field but a bool has one: numbers have a range, text a shape (tests/test_config_validation.py)."""
    return {
        "models.task": (is_model, "a model (provider/name, no spaces)"),
        "models.grader": (is_model, "a model (provider/name, no spaces)"),
        "models.judge": (is_model, "a model (provider/name, no spaces)"),
        "gateway.host": (is_host, "an IP address or a host name"),
        "gateway.port": (lambda v: 0 <= v <= 65535, "a port number from 0 to 65535"),
        "gateway.max_retries": between(0, 100),
        "gateway.breaker_failures": count(1000),
        "gateway.backoff_base_s": between(0, 3600),
        "gateway.backoff_max_s": between(0, 86400),
        "gateway.request_timeout_s": above_up_to(0, 86400),
        "gateway.cache": one_of(*CACHE_MODES),
        "gateway.budget_usd": between(0, 1e9),
        "gateway.budget_tokens": between(0, 10**15),
        "gateway.max_concurrent_calls": count(10_000),
        "gateway.requests_per_minute": count(10**6),
        "gateway.max_output_tokens": count(10**7),
        "gateway.max_n": count(128),
        "gateway.max_request_mb": count(1024),
        "gateway.local_context": count(10**6),
        "gateway.local_threads": between(0, 4096),
        "gateway.prices": PRICES,
        **LIMIT_RULES,
        "sandbox.backend": one_of(*SANDBOX_BACKENDS),
        "sandbox.docker_image": DOCKER_IMAGE,
        "sandbox.docker_host": uri(("unix", "tcp", "ssh", "http", "https")),
        "sandbox.executor": one_of(*EXECUTORS),
        "sandbox.ray_address": (lambda v: v == "auto" or has_port(v.removeprefix("ray://")),
                                "a Ray address (auto, HOST:PORT or ray://HOST:PORT)"),
        **_loop_rules(),
    }


def _loop_rules() -> dict:
    """The rules of the loop's and the trackers' fields (the rest of `_rules`)."""
    promotions = strategy_names("promotion")  # search/promotion/, plug-ins
    return {  # a strategy's name: one of search/<kind>/'s or an installed plug-in's
        **{f"loop.{key}": one_of(*strategy_names(kind)) for kind, key in CONFIG_KEYS.items()},
        "loop.max_generation": between(0, 100_000),
        "loop.max_minutes": above_up_to(0, 10**7),
        "loop.merge_every": between(0, 10**6),
        "models.meta": META_MODELS,
        "models.meta_agent": one_of(*meta_agent_names()),
        "models.heldout_grader": (lambda v: is_model(v) and v != "auto", "a model (not auto)"),
        "loop.novelty_threshold": (lambda v: 0 < v <= 1, "a number above 0 and at most 1"),
        "loop.seed": (lambda v: 0 <= v < SEED_LIMIT, f"an integer from 0 to 2**{SEED_LIMIT.bit_length() - 1} - 1"),
        "loop.parallel": (lambda v: 1 <= v <= 64, "from 1 to 64"),
        "loop.eval_samples": (lambda v: v == -1 or 1 <= v <= 10**7, "-1 (all rows) or from 1 to 10000000"),
        "loop.stages": (lambda v: stages(v, promotions), "a list of [rows, above] or [rows, above, rule] (rows from 1 to 10000000 and "
                        f"growing, above a number, rule one of {', '.join(promotions)}), or domain name -> "
                        "such a list"),
        "loop.racing_chunk": count(10**6),
        "loop.racing_alpha": (lambda v: 1e-6 <= v < 0.5, "a number from 0.000001 to below 0.5"),
        "loop.pictures_every_s": between(0, 86400),
        "loop.stage_splits": one_of(*choices.StageSplits),
        "loop.staged_score": one_of(*choices.StagedScore),
        "loop.ties": one_of(*choices.Ties),
        "loop.tie_tolerance": between(0, 0.01),
        "loop.meta_failure": one_of(*choices.MetaFailure),
        "loop.row_error": one_of(*choices.RowError),
        "loop.initial_eval": one_of(*choices.InitialEval),
        "loop.no_score": one_of(*choices.NoScore),
        "loop.initial_meta_agent": one_of("default", "paper"),  # optimizer.initial_agents.META_AGENTS
        "loop.feedback": one_of(*choices.Feedback),
        "harness.label_case": one_of(*choices.LabelCase),
        "loop.domains": (lambda v: len(v) <= 64 and all(isinstance(d, str) and d.strip() for d in v),
                         "at most 64 names of domains or spec files"),
        "loop.initial_agent": (lambda v: bool(v.strip()), "an initial agent's name or an agent folder's path"),
        "loop.run_baseline": one_of(*BASELINES),
        "loop.meta_timeout_s": above_up_to(0, 10**6),
        "loop.meta_max_calls": count(100_000),
        "loop.selector_timeout_s": above_up_to(0, 86400),
        "loop.try_max_calls": between(0, 10**6),
        "loop.workspace_file_mb": above_up_to(0, 1024),
        "loop.workspace_total_mb": above_up_to(0, 10240),
        **TRACKING_RULES,
    }


def validate(config: Config) -> Config:
    """Check every field of every section against its annotation and `_rules()`; a UserError names
    the first bad one by its dotted key, with its value and what is expected."""
    meta = config.models.meta
    if isinstance(meta, str) and "," in meta:  # --meta_model a,b: no provider's model name has a comma
        config.models.meta = [m.strip() for m in meta.split(",")]
    rules = _rules()
    if not settings_sections(config.search):
        raise UserError(f"search must be a mapping of strategy name -> its settings (a mapping of setting -> "
                        f"value), got {show(config.search)}")
    for section in dataclasses.fields(config):
        part = getattr(config, section.name)
        if not dataclasses.is_dataclass(part):  # `search`, checked above and, setting by setting, before a run
            continue
        hints = typing.get_type_hints(type(part))
        for f in dataclasses.fields(part):
            key, value = f"{section.name}.{f.name}", getattr(part, f.name)
            if not conforms(value, hints[f.name]):
                raise UserError(f"{key} must be {describe(hints[f.name])}, got {show(value)}")
            if type(value) is float and not math.isfinite(value):  # YAML's .inf and .nan: no timeout or size
                raise UserError(f"{key} must be a finite number, got {show(value)}")
            if (bad := bad_text(value, MAX_TEXT)) is not None:
                raise UserError(f"{key} must be printable text of at most {MAX_TEXT} characters, got {show(bad)}")
            test, expected = rules.get(key, (None, None))
            if test and value is not None and not test(value):
                raise UserError(f"{key} must be {expected(value) if callable(expected) else expected}, "
                                f"got {show(value)}")
    if config.sandbox.executor == "ray" and config.sandbox.backend == "none":
        raise UserError("sandbox.backend none cannot run on a Ray cluster: each node runs agent code in its own "
                        "bwrap or docker sandbox (sandbox.backend auto, bwrap or docker)")
    return config


def settings_sections(value: object) -> bool:
    """Whether `value` is shaped as `search` must be: strategy names (identifiers) -> mappings of setting names ->
    plain values (what the strategy's Settings then checks: search.registry)."""
    return isinstance(value, dict) and all(
        isinstance(name, str) and name.isidentifier() and len(name) <= 64 and isinstance(section, dict)
        and all(isinstance(k, str) and k.isidentifier() and len(k) <= 64 and bad_text(v, MAX_TEXT) is None
                for k, v in section.items())
        for name, section in value.items())


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_config(path: str | Path | None = None, preset: str | None = None) -> Config:
    """configs/default.yaml, then the preset's file (configs/presets/NAME.yaml), then `path`."""
    config = Config()
    if DEFAULT_CONFIG.is_file():  # absent in a non-editable install: the dataclass defaults apply
        _apply_file(config, DEFAULT_CONFIG)
    if preset:
        if preset not in preset_names():
            raise UserError(f"unknown preset {preset!r} (known: {', '.join(preset_names()) or 'none'})")
        _apply_file(config, PRESETS_DIR / f"{preset}.yaml")
    if path:
        _apply_file(config, Path(path))
    return validate(config)


def _apply_file(config: Config, path: Path) -> None:
    """Merge one YAML file into `config` and validate it at once, so an error names the file it came from.
    A relative spec file in its loop.domains is in the file's folder."""
    data = read_yaml(path)
    loop = data.get("loop") if isinstance(data, dict) else None  # another shape: apply_mapping says what is wrong
    if isinstance(loop, dict) and isinstance(loop.get("domains"), list):
        loop["domains"] = [str(Path(path).absolute().parent / d) if isinstance(d, str) and d.endswith(SPEC_SUFFIXES)
                           and not expand_user(d).is_absolute() else d for d in loop["domains"]]
    apply_mapping(config, data, f"config {path}")


def apply_mapping(config: Config, data: dict, where: str) -> Config:
    """Merge a mapping shaped like a config file into `config` and validate it; an error names `where`."""
    try:
        return validate(_merge(config, data, ""))
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
