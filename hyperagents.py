"""The Python API: run the loop, evaluate an agent, read a run, from a script or a notebook.

    from hyperagents import Task, evaluate, load_run, run

    result = run("imo_grading", max_generation=2, settings={"loop.promotion": "not_worse_than_parent"})
    print(result.best.scores["imo_grading"]["val"])
    task = Task(train=[{"q": "2+2?", "a": "4"}], inputs=["q"], label="a", metric=lambda p, e: e["a"] in p)
    print(run(task=task, max_generation=1).best)

Each call goes through what the command line does (`optimizer.launch` for `run`, the harness for
`evaluate`): the same config validation, run folder, lock and resume. Where a command would print
one line and exit 2, a call raises `UserError` with that line; a provider's outage raises `ProviderDown`
and a failure of this machine (a full disk, the Docker engine gone) `MachineDown`, a ProviderDown too,
after which the same call with `resume_from` goes on. Each is an `Error`, an Exception (Ctrl-C stays
KeyboardInterrupt). The `str()` of each is the line as the command shows it: what it
quotes from a folder or an agent has every control, bidi and newline character written visibly, so
printing it (or a traceback of it) in a terminal or a notebook acts on nothing. Results are frozen
dataclasses read back from the run's own records (archive.store, archive.records, search.stats, the
ledger), so a run started on the command line reads the same as one started here.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import cast

from apps import pictures
from archive.experiments import EVALUATIONS, Evaluations, read_evaluations
from archive.promotion import row_scores
from archive.row_costs import FrontPoint, RowCost
from archive.run_folder import read_run_record
from archive.run_state import read_state
from archive.run_views import EvalResult, NodeView, RunView, Score, Spend, node_view, run_row_costs, run_spend
from archive.store import Archive, observed_best, observed_sizes
from domains.base import Domain
from domains.registry import register
from domains.spec import DomainSpec, check_data, checked, differs, run_specs
from domains.spec_scoring import SpecScorer
from optimizer.launch import launch, plan_of, prepare
from optimizer.plan import RunPlan
from optimizer.request import RunRequest
from optimizer.transfer import split_spec
from search.registry import configured
from search.stats import interval
from services.errors import Error, UserError, api_errors
from services.errors import MachineDownError as MachineDown
from services.errors import ProviderDownError as ProviderDown
from services.fsutil import make_folder, release_folder, write_below

__all__ = ["Error", "EvalResult", "FrontPoint", "MachineDown", "NodeView", "ProviderDown", "RowCost", "RunPlan",
           "RunView", "Score", "Spend", "Task", "UserError", "evaluate", "load_run", "plan", "run"]
TASK_DATA = "task_data"  # RUN/task_data/<split>.jsonl: a Task's examples as its run keeps them
ROW_ID = "row_id"  # the column of a Task's row ids, made here ("train-0", ...): examples need none


def load_run(path: str | Path) -> RunView:
    """The run in folder `path`: its records checked as a resume checks them (UserError otherwise);
    nothing is written, and a running run is read as it is now."""
    run_dir = Path(path).resolve()
    record = read_run_record(run_dir)
    search = record.config.get("search")
    try:  # the strategies' own settings checked as a resume checks them (a strategy object's names are the API's)
        configured(search if isinstance(search, dict) else {})
    except UserError as e:
        raise UserError(f"{run_dir / 'run.json'}: {e}") from None
    nodes = Archive(run_dir).ordered()
    try:
        best = observed_best(nodes, observed_sizes(record.domains, nodes), run_dir, record.config.get("loop"),
                             record.config.get("search"))
    except ValueError as e:
        raise UserError(f"{run_dir / 'run.json'}: {e}") from None
    spend = run_spend(run_dir, nodes)
    costs, front = run_row_costs(run_dir, record.domains, nodes)
    views = {n.node_id: node_view(n, costs[n.node_id]) for n in nodes}
    return RunView(run_dir, record.name, tuple(record.tags), tuple(record.domains), str(read_state(run_dir)[0]),
                   views, best and views[best.node_id], spend, sum(s.cost_usd for s in spend.values()),
                   sum(s.tokens for s in spend.values()), record.config, front)


@dataclass(frozen=True, kw_only=True)
class Task:
    """A task of your own from examples in memory and a metric, run (`run(task=...)`) as a domain written as a
    spec (domains/spec.py) whose examples the run keeps in RUN/task_data/. Examples map keys to JSON values:
    `inputs` are the keys the task agent is given, `label` the expected answer's; it and every other key never
    reach an agent (train labels reach the meta agent as feedback, as for every domain). `metric(prediction,
    example) -> bool | float in [0, 1]` is your code, called on the host by the process that scores, never in
    a sandbox, with a copy of the example; a run's record names it, never imports it: a resume takes the same
    Task again (`run(task=..., resume_from=RUN)`)."""

    train: Sequence[Mapping[str, object]]
    metric: Callable[[str, dict], object]
    inputs: Sequence[str]
    label: str | None = None
    val: Sequence[Mapping[str, object]] = ()
    test: Sequence[Mapping[str, object]] = ()
    name: str = "task"  # the domain's name in the run (lower-case letters, digits, _)
    score_key: str = "score"  # the mean of the metric over rows, as reports name it


@dataclass(frozen=True)
class _MetricScorer(SpecScorer):
    """A Task's scorer: the spec's, calling the Task's metric (a field a record never holds)."""

    call: Callable[[str, dict], object] | None = field(default=None, compare=False, repr=False)

    def _function(self, name: str) -> Callable:
        return cast(Callable, self.call)


@dataclass(frozen=True)
class _TaskSpec(DomainSpec):
    """A Task's spec; its metric is an attribute (`_call`), so neither its record nor a comparison holds it."""

    def domain(self) -> Domain:
        base, call = super().domain(), getattr(self, "_call", None)
        s = cast(SpecScorer, base.scorer)
        return replace(base, scorer=_MetricScorer(s.rule, s.score_key, s.label, s.inputs, call=call),
                       score_note=f"the mean of the rows' scores by the metric of hyperagents.Task {self.name}")


def _examples(task: Task, where: str) -> dict[str, list[dict]]:
    """Per split, the task's examples with their row ids, each checked: text keys, the inputs and the label."""
    needed, splits = [*task.inputs, *([task.label] if task.label is not None else [])], {}
    for split, rows in (("train", task.train), ("val", task.val), ("test", task.test)):
        for i, example in enumerate(rows or ()):
            if not isinstance(example, Mapping) or not all(isinstance(k, str) for k in example):
                raise UserError(f"{where}: {split} example {i} is not a mapping of text keys")
            if (missing := [k for k in needed if k not in example]) or ROW_ID in example:
                raise UserError(f"{where}: {split} example {i} " + (f"has no key {missing[0]!r}" if missing else
                                                                     f"has the key {ROW_ID!r}, the task's row id"))
            splits.setdefault(split, []).append({ROW_ID: f"{split}-{i}", **example})
    if "train" not in splits:
        raise UserError(f"{where}: train holds no example")
    return splits


def _task_spec(task: Task, run_dir: Path) -> tuple[_TaskSpec, dict[str, bytes]]:
    """The spec of `task` whose data is in `run_dir`, and each split's data file."""
    where = f"Task {task.name!r}"
    if not callable(task.metric) or isinstance(task.inputs, str) or task.label in task.inputs:
        raise UserError(f"{where}: metric must be a function (prediction, example), inputs a list of keys "
                        "and the label none of them")
    splits = _examples(task, where)
    try:
        files = {s: "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in rows).encode()
                 for s, rows in splits.items()}
    except (TypeError, ValueError) as e:
        raise UserError(f"{where}: an example holds a value JSON cannot write ({e})") from None
    shown, name = {*task.inputs, task.label, ROW_ID}, getattr(task.metric, "__name__", "")
    spec = checked({"name": task.name, "data": {s: f"{s}.jsonl" for s in files}, "id": ROW_ID,
                    "inputs": {k: k for k in task.inputs}, "label": task.label, "score_key": task.score_key,
                    "scorer": "task:" + (name if name.isidentifier() else "metric"),
                    "hidden": sorted({k for rows in splits.values() for e in rows for k in e} - shown)},
                   where, run_dir / TASK_DATA, files=False)
    try:
        source = hashlib.sha256(inspect.getsource(task.metric).encode()).hexdigest()
    except (OSError, TypeError):
        source = ""  # defined where its source cannot be read (python -c, a REPL): not compared on resume
    spec = _TaskSpec(**{**{f.name: getattr(spec, f.name) for f in fields(spec)}, "scorer_sha256": source,
                        "sha256": {s: hashlib.sha256(data).hexdigest() for s, data in files.items()},
                        "source": str(run_dir / TASK_DATA / "hyperagents.Task")})
    originals, metric = {e[ROW_ID]: e for rows in splits.values() for e in rows}, task.metric

    def call(prediction: str, row: dict) -> object:
        example = copy.deepcopy(originals.get(str(row.get(ROW_ID)), row))
        example.pop(ROW_ID, None)
        return metric(prediction, example)

    object.__setattr__(spec, "_call", call)
    return spec, files


def _use_task(task: Task, run_dir: Path, resumed: bool) -> str:
    """Check `task`, keep its examples in `run_dir`, make its domain known; its name. A resumed run's must match."""
    if not isinstance(task, Task):
        raise UserError(f"run: task must be a hyperagents.Task, got {type(task).__name__}")
    spec, files = _task_spec(task, run_dir)
    kept = {s.name: s for s in run_specs(run_dir)} if resumed else {}
    if resumed and (task.name not in kept or (what := differs(kept[task.name], spec)) is not None):
        raise UserError(f"run: the run {run_dir} was not started with this Task (" + (
            f"it kept no task {task.name})" if task.name not in kept else f"{what} differs)"))
    if not resumed and (run_dir / "run.json").exists():
        raise UserError(f"{run_dir} already holds a run: pass resume_from={str(run_dir)!r}, or another run_id")
    make_folder(run_dir)
    for split, data in files.items():  # a resumed run's, when the Task is the same, the same bytes again
        write_below(run_dir, f"{TASK_DATA}/{split}.jsonl", data)
    check_data(spec, f"Task {task.name!r}")
    return register(spec, replace=True).name


def _named(values: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """`values` with each search strategy given as an object (not a name) replaced by the name it is used by
    (search.registry.use); keys are config keys after `prefix` ("loop." for settings, "" for options)."""
    from search.registry import use
    from services.strategy_names import CONFIG_KEYS

    kinds = {f"{prefix}{key}": kind for kind, key in CONFIG_KEYS.items()}
    return {k: use(kinds[k], v) if k in kinds and v is not None and not isinstance(v, str) else v
            for k, v in values.items()}


def _config_named(config: Mapping) -> dict:
    """A config mapping with its loop section's strategies given as objects named (`_named`)."""
    loop = config.get("loop")
    return {**config, "loop": _named(loop)} if isinstance(loop, Mapping) else dict(config)


def _settings(settings: Mapping[str, object] | Sequence[str] | None) -> tuple:
    """`settings` as apply_settings takes them: a mapping's items, or SECTION.KEY=VALUE texts."""
    if settings is None:
        return ()
    return tuple(_named(settings, "loop.").items()) if isinstance(settings, Mapping) else tuple(settings)


@api_errors
def run(domain: str | Sequence[str] | None = None, config: str | Path | Mapping | None = None,
        output_dir: str | Path = "./outputs", *, domain_spec: str | Path | Sequence[str | Path] | None = None,
        preset: str | None = None, settings: Mapping[str, object] | Sequence[str] | None = None,
        run_id: str | None = None, resume_from: str | Path | None = None, name: str | None = None,
        tags: Sequence[str] | None = None,
        data: Mapping[str, str] | None = None, initial_from: str | None = None, transfer: str | None = None,
        dashboard: int | None = None, task: Task | None = None, **overrides: object) -> RunView:
    """Run the loop as `python -m run_optimization` does, and return the run read back.

    `domain_spec` adds domains of one's own (YAML specs, as --domain_spec), `task` one from examples in
    memory and a metric (`Task`). `config` is a YAML file or a
    mapping shaped like one; `settings` sets single fields ({"loop.promotion": "sica"}, as --set), after
    `preset` and `config`; `overrides` are the command line's options by name (max_generation=2,
    eval_samples=20, task_model=..., budget_usd=..., track=[...]), applied last. A search strategy (parent
    selection, promotion, best choice, novelty, meta model choice, merge partner) is a name or an object that
    has its kind's methods (search/<kind>/__init__.py), e.g. `parent_selection=MySelection()`: the run's
    record keeps its name (its `name` attribute or its class's), and a resume must be given it again.
    `resume_from` continues a run (its config is its own, settings and overrides applied over it, except
    where code runs and data goes, which come from this call or the defaults: archive/run_folder.py). The
    run's lock is let go when the call returns, so another process may resume it."""
    if isinstance(domain, str):
        domain = [domain]
    run_id = run_id or datetime.now().strftime("%Y%m%d_%H%M%S_%f")
    folder = Path(resume_from) if resume_from else Path(output_dir) / run_id
    if task is not None:
        named = _use_task(task, folder.resolve(), resume_from is not None)
        domain = list(domain or ()) if resume_from else [*(domain or ()), named]
    request = _request(domain, config, output_dir, domain_spec, preset, settings, run_id, resume_from, name, tags,
                       data, initial_from, transfer, overrides, dashboard=dashboard)
    try:
        run_dir = launch(request, draw=pictures.draw)
    finally:
        release_folder(folder.resolve())
    return load_run(run_dir)


def _request(domain: str | Sequence[str] | None, config: str | Path | Mapping | None, output_dir: str | Path,
             domain_spec: str | Path | Sequence[str | Path] | None, preset: str | None,
             settings: Mapping[str, object] | Sequence[str] | None, run_id: str | None,
             resume_from: str | Path | None, name: str | None, tags: Sequence[str] | None,
             data: Mapping[str, str] | None, initial_from: str | None, transfer: str | None,
             overrides: dict[str, object], **more: object) -> RunRequest:
    """The RunRequest of `run`'s (or `plan`'s) arguments."""
    domains = [domain] if isinstance(domain, str) else list(domain or ())
    specs = [domain_spec] if isinstance(domain_spec, (str, Path)) else list(domain_spec or ())
    return RunRequest(
        domains=tuple(domains), domain_specs=tuple(map(str, specs)),
        config=_config_named(config) if isinstance(config, Mapping) else config, preset=preset,
        settings=_settings(settings), overrides=_named(overrides),
        data=tuple(f"{k}={v}" for k, v in (data or {}).items()),
        output_dir=output_dir, run_id=run_id, resume_from=resume_from, name=name,
        tags=None if tags is None else tuple([tags] if isinstance(tags, str) else tags), initial_from=initial_from,
        transfer=transfer, **more)  # type: ignore[arg-type]


@api_errors
def plan(domain: str | Sequence[str] | None = None, config: str | Path | Mapping | None = None,
         output_dir: str | Path = "./outputs", *, domain_spec: str | Path | Sequence[str | Path] | None = None,
         preset: str | None = None, settings: Mapping[str, object] | Sequence[str] | None = None,
         run_id: str | None = None, resume_from: str | Path | None = None, name: str | None = None,
         tags: Sequence[str] | None = None, data: Mapping[str, str] | None = None, initial_from: str | None = None,
         transfer: str | None = None, replicates: int | None = None, **overrides: object) -> RunPlan:
    """What `run` with the same arguments would do and cost, as `--dry_run` prints it: its plan's lines, the cost
    estimate (`.estimate.run_usd`) and the sandbox backend. Nothing is made and no model is called; a problem
    the run would refuse is the same UserError. (A `Task` is planned by its run: it is not taken here.)"""
    request = _request(domain, config, output_dir, domain_spec, preset, settings,
                       run_id or datetime.now().strftime("%Y%m%d_%H%M%S_%f"), resume_from, name, tags, data,
                       initial_from, transfer, overrides, dry_run=True, replicates=replicates)
    return plan_of(prepare(request))


def _node_of(agent: str) -> tuple[Path, str] | None:
    """(run folder, node id) when `agent` is "RUN:NODE" and RUN is a run folder; else None (an agent path)."""
    folder, node_id = split_spec(agent)
    return (Path(folder), node_id) if node_id is not None and (Path(folder) / "run.json").is_file() else None


@api_errors
def evaluate(agent: str | Path, domain: str | None = None, split: str = "val", *, run_dir: str | Path | None = None,
             config: str | None = None, settings: Mapping[str, object] | Sequence[str] | None = None,
             output_dir: str | Path = "./outputs", run_id: str | None = None, num_samples: int = -1,
             model: str | None = None, budget_usd: float | None = None, **options: object) -> EvalResult:
    """Evaluate an agent on `split` of `domain` and score it.

    `agent` is a node of a run ("RUN:NODE", or a node id with `run_dir=`): the split is evaluated in full
    as `run_optimization --resume_from RUN --evaluate NODE --split SPLIT` does, into the run's
    evaluations.json (`domain` defaults to the run's first). Otherwise it is a task agent's file or
    module (as --agent_path), run by the harness into a folder of its own under `output_dir` on the
    first `num_samples` rows (-1: all), then scored as `python -m domains.report` scores it. `options`
    are the harness's other flags (num_workers, sandbox, data, domain_spec: a YAML spec for `domain`).
    A run's domain scored by a function of your own needs `domain_spec` too, the spec the run was
    started with: a run's folder never names code to run."""
    node = (Path(run_dir), str(agent)) if run_dir is not None else _node_of(str(agent))
    spec = options.pop("domain_spec", None)
    if spec is not None and not isinstance(spec, (str, os.PathLike)):
        raise UserError(f"evaluate: domain_spec is a YAML file's path, got {type(spec).__name__}")
    if node is not None:
        return _evaluate_node(*node, domain, split, settings, budget_usd,
                              () if spec is None else (os.path.abspath(spec),))
    if spec is not None:
        from domains.registry import use_domain_specs

        domain = domain or use_domain_specs([os.path.abspath(spec)])[0]  # made known either way
    if domain is None:
        raise UserError("evaluate: name the domain of the task agent (or its domain_spec)")
    return _evaluate_agent(str(agent), domain, split, config, settings, output_dir, run_id, num_samples, model,
                           budget_usd, options)


def _evaluate_node(run_dir: Path, node_id: str, domain: str | None, split: str,
                   settings: Mapping[str, object] | Sequence[str] | None, budget_usd: float | None,
                   specs: tuple[str, ...]) -> EvalResult:
    record = read_run_record(run_dir.resolve())
    domain = domain or record.domains[0]
    if domain not in record.domains:
        raise UserError(f"evaluate: run {run_dir} has no domain {domain} (it has {', '.join(record.domains)})")
    try:
        launch(RunRequest(resume_from=run_dir, domain_specs=specs, settings=_settings(settings),
                          overrides={"budget_usd": budget_usd}, evaluate=(node_id,), split=split),
               draw=pictures.draw)
    finally:
        release_folder(run_dir.resolve())
    found = cast(Evaluations, read_evaluations(run_dir / EVALUATIONS)).get(node_id, domain, split)  # just written
    if found is None:
        raise UserError(f"evaluate: node {node_id} of {run_dir} was not evaluated on {domain}/{split}")
    return EvalResult(domain, split, Score.of(found), run_dir.resolve())


def _evaluate_agent(agent_path: str, domain: str, split: str, config: str | None,
                    settings: Mapping[str, object] | Sequence[str] | None, output_dir: str | Path, run_id: str | None,
                    num_samples: int, model: str | None, budget_usd: float | None, options: dict) -> EvalResult:
    from domains.harness.__main__ import config_of
    from domains.harness.__main__ import evaluate as run_harness
    from domains.harness.request import EvalRequest
    from domains.registry import get_domain
    from domains.report import report

    known = [o for o in EvalRequest.options() if o not in ("domain", "subset", "agent_path")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserError(f"evaluate: unknown option {unknown[0]} (known: {', '.join(sorted(known))})")
    data = options.pop("data", None) or ()  # DOMAIN=PATH texts, or a mapping of them
    data = [f"{k}={v}" for k, v in data.items()] if isinstance(data, Mapping) else [data] if isinstance(data, str) \
        else list(cast(Sequence, data))
    run_id = run_id or datetime.now().strftime("%Y%m%d_%H%M%S_%f")
    args = EvalRequest(**{**options, "data": tuple(data), "domain": domain, "agent_path": agent_path, "subset": split,
                          "config": config, "settings": _settings(settings), "output_dir": output_dir, "run_id": run_id,
                          "num_samples": num_samples, "model": model, "budget_usd": budget_usd})
    settings_of_run = config_of(args)
    run_harness(args, settings_of_run)
    folder = (Path(output_dir) / run_id).resolve()
    scored = report(folder, domain, settings_of_run, model)
    rows = row_scores(scored, get_domain(domain).score_key)
    band = interval(list(rows.values())) if rows else None
    value = scored.get(get_domain(domain).score_key)
    return EvalResult(domain, split, Score(value if isinstance(value, (int, float)) else None,
                                           len(rows) if rows else None, (band.low, band.high) if band else None),
                      folder)
