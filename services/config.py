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
class ModelsConfig:
    # "auto": the first provider whose key is set, else the local model (services/providers.py)
    task: str = "auto"  # model of the task agent; role alias "task"
    meta: str | list[str] = "auto"  # model of the meta agent; role alias "meta" (the first); a list (or --meta_model a,b): a bandit (loop.meta_bandit) picks one per generation
    grader: str = "auto"  # model of the proof grader; role alias "grader"
    judge: str = "auto"  # model of LLM judges in answer domains; role alias "judge"
    meta_agent: str = "builtin"  # what edits the code each generation: builtin (the workspace's meta agent, run by inside/run_meta.py) | paper (the same, starting from the HyperAgents reference's meta agent: loop.initial_meta_agent paper) | claude-code | codex | mini-swe-agent | an installed plug-in's (services/coding_agents/; python -m services.install --coding-agents)
    heldout_grader: str | None = None  # a second, independent grader model for imo_proof (any domain graded by a grader model): the best nodes' proofs graded again, never optimized against, to report the gap per generation (loop.best_choice heldout reads it); role alias "heldout_grader"; null = off


@dataclass
class GatewayConfig:
    host: str = "127.0.0.1"  # loopback only: the gateway holds the provider keys
    port: int = 0  # 0 = any free port, chosen per run
    max_retries: int = 5  # retries of transient provider errors (429, 5xx, timeouts)
    breaker_failures: int = 5  # provider failures in a row (each after its retries) that stop the run, if a probe call fails too
    backoff_base_s: float = 1.0  # first retry delay; doubles each time, with full jitter
    backoff_max_s: float = 30.0  # cap of one retry delay
    request_timeout_s: float = 900.0  # one provider call; reasoning models can be slow
    cache: str = "temperature0"  # temperature0 | all | off: which identical requests are replayed
    prompt_caching: bool = True  # ask providers to cache stable prompt prefixes (system prompt, a conversation's history), billed at their cached rate
    budget_usd: float | None = None  # stop new calls once this much is spent (None = no limit)
    budget_tokens: int | None = None  # stop new calls once this many tokens are spent
    max_concurrent_calls: int | None = None  # provider calls in flight at once, over all models (None = no limit)
    requests_per_minute: int | None = None  # provider calls started per minute and model, retries too (None = no limit)
    max_output_tokens: int = 32768  # cap of a request's max_tokens, and what a request without one gets (bounds its cost)
    max_n: int = 4  # most choices (`n`) one request may ask for
    max_request_mb: int = 16  # largest request body; a larger one is refused unread
    local_context: int = 2048  # tokens of context a local model is served with; prompt runs at ~300 tokens/s on 2 cores
    local_threads: int = 0  # CPU threads of the local model server (0 = half the cores)
    prices: dict = field(default_factory=dict)  # model -> [usd per 1M input, per 1M output(, per 1M cached read, per 1M cache write)] for models litellm has no price for


@dataclass
class HarnessConfig:
    num_workers: int = 5  # rows evaluated in parallel (threads in one worker process)
    save_interval: int = 100  # rewrite predictions.csv every N finished rows (the journal is written at once)
    row_timeout_s: float = 1800.0  # a row still running after this is recorded as an error
    start_timeout_s: float = 300.0  # a worker that has not loaded the agent by then is killed
    max_prediction_bytes: int = 1_000_000  # a row's answer longer than this (UTF-8) is recorded as an error
    data_files: dict = field(default_factory=dict)  # domain -> data file, for domains not bundled (amo_bench)
    label_case: str = "lenient"  # how imo_proof reads a grader's labels: lenient (case and space ignored) | exact (the reference's); services/departures.py


@dataclass
class SandboxConfig:
    backend: str = "auto"  # auto | docker | bwrap | none; auto = docker if an engine answers, else bwrap
    memory_mb: int = 4096  # address space (bwrap) / memory limit (docker) of agent code
    pids: int = 256  # processes and threads at once: a fork bomb stops here
    cpus: float = 2.0  # CPU cores a docker container may use
    cpu_seconds: int = 7200  # CPU time of one sandboxed process before the kernel kills it
    file_size_mb: int = 1024  # largest file agent code may write
    disk_mb: float = 2048  # what commands may write in all to the workspace and writable folders; past it they are killed
    tmp_mb: int = 512  # size of the private /tmp
    output_cap_mb: float = 16  # stdout+stderr kept from one command; a command printing more is killed
    docker_image: str = "hyperagents-sandbox:latest"  # built by `python -m services.sandbox build-image`
    docker_host: str | None = None  # engine address (default: DOCKER_HOST or the local socket)
    executor: str = "local"  # local | ray: where sandboxes run; ray = on the nodes of a Ray cluster, each in its own backend
    ray_address: str | None = None  # with executor ray: None = a private Ray instance here, "auto" = this machine's cluster, HOST:PORT or ray://HOST:PORT


@dataclass
class LoopConfig:
    max_generation: int = 10  # generations after the initial node
    max_minutes: float | None = None  # wall clock of one command (run_optimization, or a resume of it) before it stops the run as Ctrl-C does, resumably; counted from the command's start; a resume keeps no limit unless given one (archive/run_folder.py PER_COMMAND); null = none
    parent_selection: str = "score_child_prop"  # random | latest | best | score_prop | score_child_prop (the paper's) | pareto (GEPA's per-row front) | islands (score_child_prop within loop.islands sub-archives) | an installed plug-in's; each a file of search/parent_selection/
    islands: int = 4  # parent_selection islands: how many sub-archives (generation g draws from island g mod islands)
    migrate_every: int = 10  # parent_selection islands: every this many generations each island's best node joins the next island
    merge_every: int = 0  # every this many generations, a merge: its meta agent gets a second parent of another lineage that is better on rows the first is not, and is asked to combine them; 0 = never (the paper's)
    merge_partner: str = "complement"  # with merge_every: how the second parent is chosen (search/merge_partner/, or a plug-in's)
    meta_bandit: str = "ucb1"  # with models.meta a list: the meta model choice (search/meta_model_choice/: ucb1 | thompson, or a plug-in's), rewarded by the child's gain over its parent per dollar
    novelty_threshold: float | None = None  # a child whose change is at least this alike (0-1, by novelty_measure) to an earlier node's is recorded duplicate and not evaluated (archive/novelty.py); null = off (the paper's)
    novelty_measure: str = "dice"  # how alike two changes are: dice (the Dice coefficient of the diffs' changed lines, in any order) | an installed plug-in's; each a file of search/novelty/
    seed: int | None = None  # seeds parent selection, so a run can be replayed
    parallel: int = 1  # generations in flight at once (meta agent and evaluation each in its own sandbox)
    replayable: bool = True  # with parallel > 1: generation g picks its parent among generations <= g - parallel, waiting for them, so a seeded run replays; false: from every node finished when a slot frees (faster when generations take uneven time, not replayable)
    eval_samples: int = -1  # rows of each full evaluation split (-1 = all)
    skip_staged_eval: bool = False  # go straight to the full evaluation
    initial_eval: str = "full"  # full: the initial node is screened, then evaluated on the full splits like any node | stage: on the first stage's rows of its splits only, no verdict; services/departures.py
    row_error: str = "wrong"  # a row on which the task agent's own code raised (never a provider's failure, a timeout or a cap of ours): wrong: a wrong answer, the evaluation stands | invalid: the evaluation has no score of its own (a full one keeps the screening it continued); services/departures.py
    reuse_evaluations: bool = True  # a node whose task agent's code an earlier node has takes that node's evaluations | false: each node's evaluation is its own (a resume still pays no row twice); services/departures.py
    stages: list | dict | None = None  # screening stages before the full evaluation, [[rows, above], ...] or [[rows, above, rule], ...], for every domain or by domain name ({imo_grading: [[10, 0]], ...}; a domain not named keeps its own): each runs the first rows of train and the next runs only if every domain passes the stage's promotion rule (`promotion` when the stage names none); null = each domain's own (10 rows, above 0)
    promotion: str = "score_above"  # how a stage promotes a child: score_above (the paper's: score > above) | not_worse_than_parent (and not worse than its parent on the rows both ran, by a one-sided paired test at promotion_level) | sica (and at least the lower bound of the best node's 95% interval on those rows) | an installed plug-in's; each a file of search/promotion/
    promotion_level: float = 0.05  # not_worse_than_parent: a child is rejected when the test's p-value is below this
    promotion_test: str = "exact"  # not_worse_than_parent's test: exact (sign test; sign-flip permutation for partial credit) | bootstrap (paired)
    pictures_every_s: float = 10.0  # plots and report.html are redrawn when a node comes back, at most this often (and at the end of the run)
    best_choice: str = "highest"  # which node is the run's best (report, --final_test, transfer, sica's peer): highest (the paper's: the highest selection score; `ties` breaks equal ones) | paired (nodes in generation order; a node replaces the best so far only when a one-sided paired test on the selection split's shared rows finds it better at best_level) | heldout (nodes in generation order; a node replaces the best so far only when it scores higher and its grade by models.heldout_grader is not below the best's, so the held-out grade never falls along the bests) | an installed plug-in's; each a file of search/best_choice/
    best_level: float = 0.05  # best_choice paired: a node replaces the best so far when the test's p-value is below this (the test is promotion_test)
    final_test: bool = False  # once the last generation is recorded, evaluate the test split once, for the node chosen on val and the initial node (the loop never reads test scores)
    edit_select_parent: bool = False  # the workspace's select_next_parent.py chooses parents
    run_baseline: str | None = None  # no_selfimprove (meta agent frozen) | no_archive (always the latest node)
    initial_meta_agent: str = "default"  # the meta agent a run from a project task agent (--initial_agent proofautograder) starts with: default (the project's, meta_agent/) | paper (the reference's one-line meta agent and agent code, the task agent as its task_agent.py); services/departures.py
    feedback: str = "train_reports"  # what feedback/<node>/ gives later meta agents: train_reports (patch, train scores, train reports and predictions) | paper (also the meta transcript, a generation log with val scores and each train row's transcript, bounded: optimizer/feedback.py); services/departures.py
    domains: list[str] = field(default_factory=list)  # the domains of a new run that names none (--domain, --domain_spec): names, and spec files (.yaml/.yml; a relative path is in the folder of the config file that names it, else the current folder); never read on a resume
    initial_agent: str = "default"  # the agent of node `initial`: a name of optimizer/initial_agents.py (paper: the reference's generic agents) or an agent folder's path
    stage_splits: str = "train"  # train | train_and_val: what each screening stage runs, its verdict always read on train (the paper's: the same rows of val too, so a node that stops there has a val score)
    staged_score: str = "train"  # train | selection: the split a node that only passed screening is selected on, scaled by its share of the full rows (the paper's: selection, its val rows)
    scale_initial: bool = False  # the initial node's selection score is scaled by the first stage's share of the rows, as if it only passed screening (the paper's: yes, so it is rarely chosen again)
    ties: str = "latest"  # latest | earliest: which of equal scores `best` takes, as a parent and as the run's best (the paper's: earliest)
    tie_tolerance: float = 1e-12  # scores closer than this are equal, and `ties` decides, wherever a best is taken (archive/selection.py TIE_TOLERANCE); 0: bit-equal floats only; services/departures.py
    no_score: str = "stop"  # when no node can be a parent (none valid with a score on every domain): stop: the run ends in one line naming the initial node's state | initial_at_zero: the initial node is the parent, at score 0; services/departures.py
    meta_failure: str = "child"  # a meta agent that failed (exited non-zero, timed out, every call failed): its child is recorded meta_failed and never evaluated under both | parent: its parent (never the initial node) is no longer chosen either; services/departures.py
    try_command: bool = True  # the meta agent gets a command that runs the task agent on train rows (the paper's: none)
    meta_timeout_s: float = 3600.0  # wall clock of one meta agent run
    meta_max_calls: int = 40  # model calls (one tool call each) of one meta agent run, enforced by the gateway
    selector_timeout_s: float = 120.0  # one run of the agent's own select_next_parent.py
    try_max_calls: int = 200  # model calls of the meta agent's try command in one meta run, enforced by the gateway
    workspace_file_mb: float = 5  # largest file of a workspace taken into a node's commit; larger ones are dropped
    workspace_total_mb: float = 50  # all files of a workspace taken into a node's commit; past this, files are dropped


@dataclass
class TrackingConfig:
    backends: list[str] = field(default_factory=list)  # experiment trackers the run also logs to (--track): mlflow | wandb | tensorboard, each a pip extra (pip install -e ".[mlflow]")
    mlflow_uri: str | None = None  # MLflow tracking URI (http://HOST:PORT; sqlite:///PATH with the full mlflow package); null = a file store in RUN/tracking/mlruns
    experiment: str | None = None  # the MLflow experiment and the W&B project a run is logged under; null = MLFLOW_EXPERIMENT_NAME or WANDB_PROJECT when set, else hyperagents
    wandb_mode: str | None = None  # offline: W&B's files in RUN/tracking/wandb (upload later with `wandb sync`) | online (needs WANDB_API_KEY); null = WANDB_MODE when set, else offline
    wandb_entity: str | None = None  # the W&B team or user; null = the account's default
    text_kb: int = 256  # agent-written text (a patch, an error) is cut to this many KiB before a tracker gets it


@dataclass
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

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
PROMOTION_TESTS = ("exact", "bootstrap")
ROLE_ALIASES = tuple(f.name for f in dataclasses.fields(ModelsConfig))


_Section = typing.TypeVar("_Section", bound="DataclassInstance")


def _merge(obj: _Section, data: object, where: str) -> _Section:
    if not isinstance(data, dict):
        raise UserError(f"config section {where or 'top level'} must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        if key not in known:
            name = key if isinstance(key, str) and key.isidentifier() else show(key)
            raise UserError(f"unknown config key {where + '.' if where else ''}{name} (known: {', '.join(known)})")
        current = getattr(obj, key)
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
        "loop.islands": (lambda v: 1 <= v <= 64, "from 1 to 64"),
        "loop.migrate_every": count(10**6),
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
        "loop.promotion_level": (lambda v: 0 < v < 1, "a number between 0 and 1"),
        "loop.promotion_test": one_of(*PROMOTION_TESTS),
        "loop.pictures_every_s": between(0, 86400),
        "loop.best_level": (lambda v: 0 < v < 1, "a number between 0 and 1"),
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
    for section in dataclasses.fields(config):
        part = getattr(config, section.name)
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
