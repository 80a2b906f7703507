"""A run as the command line or the Python API asks for it (RunRequest), and the config it makes: the defaults,
the preset, the config file or mapping, the --set settings and the options, in that order, validated."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from archive.records import RunRecord, check_labels
from services.config import Config, apply_mapping, load_config, show, validate
from services.errors import UserError
from services.flags import apply_settings, parse_data_flags

# The options that set one config field each (the command line's flags of the same names), applied
# after the config file and --set: option -> (section, field).
FLAG_FIELDS = {
    **{name: ("loop", name) for name in ("max_generation", "eval_samples", "parent_selection", "seed", "parallel",
                                         "skip_staged_eval", "final_test", "edit_select_parent", "run_baseline",
                                         "initial_agent", "max_minutes")},
    "budget_usd": ("gateway", "budget_usd"), "eval_workers": ("harness", "num_workers"),
    "meta_model": ("models", "meta"), "meta_agent": ("models", "meta_agent"), "task_model": ("models", "task"),
    "sandbox": ("sandbox", "backend"),
    "executor": ("sandbox", "executor"), "ray_address": ("sandbox", "ray_address"),
    "track": ("tracking", "backends"),
}


@dataclass(frozen=True)
class RunRequest:
    """One run to start, resume or evaluate, as the command line or the API asks for it."""

    domains: tuple[str, ...] = ()  # domain names of a new run (a resumed run keeps its own)
    domain_specs: tuple[str, ...] = ()  # YAML specs of domains of one's own (--domain_spec), added to `domains`
    config: str | Path | dict | None = None  # a YAML file, or a mapping shaped like one, applied after the preset
    preset: str | None = None  # a config of configs/presets/, applied before `config`
    settings: tuple = ()  # SECTION.KEY=VALUE texts (--set) or (SECTION.KEY, value) pairs, applied after `config`
    overrides: dict = field(default_factory=dict)  # option of FLAG_FIELDS -> value (None: not given), applied last
    data: tuple[str, ...] = ()  # DOMAIN=PATH items: data files of domains that are not bundled
    output_dir: str | Path = "./outputs"  # parent folder of a new run
    run_id: str | None = None  # a new run's folder name (default: a timestamp)
    resume_from: str | Path | None = None  # a run folder to continue
    name: str | None = None  # the run's name (None: a new run has none, a resumed run keeps its own)
    tags: tuple[str, ...] | None = None  # the run's tags (None: as for `name`)
    initial_from: str | None = None  # RUN[:NODE]: a new run starts from another run's node
    transfer: str | None = None  # with initial_from: meta or all
    evaluate: tuple[str, ...] | None = None  # node ids to evaluate on `split` in full, no generation
    split: str | None = None  # the split `evaluate` evaluates
    dry_run: bool = False  # print the plan and the estimate only
    replicates: int | None = None  # with dry_run: the group's line of the plan
    dashboard: int | None = None  # serve the run's dashboard on this port while it runs


def apply_overrides(config: Config, overrides: dict, data: Iterable[str] = ()) -> Config:
    """The options of FLAG_FIELDS given (not None) and the data files, over `config`, validated."""
    unknown = sorted(set(overrides) - set(FLAG_FIELDS))
    if unknown:
        raise UserError(f"unknown option {show(unknown[0])} (known: {', '.join(sorted(FLAG_FIELDS))})")
    config.harness.data_files.update(parse_data_flags(list(data)))
    for option, value in overrides.items():
        if value is not None:
            section, name = FLAG_FIELDS[option]
            setattr(getattr(config, section), name, value)
    return validate(config)


def labels(request: RunRequest, record: RunRecord | None) -> tuple[str, list[str]]:
    """The run's name and tags: the request's, else the resumed run's own; checked as run.json is."""
    name = request.name if request.name is not None else record.name if record else ""
    tags = list(dict.fromkeys(request.tags)) if request.tags is not None else record.tags if record else []
    try:
        check_labels(name, tags)
    except ValueError as e:  # "name ...", "tag ...": the flag that gave it
        raise UserError(f"--{e}") from None
    return name, tags


def command_config(request: RunRequest) -> Config:
    """What the command gives: the defaults, the preset and `request.config`, then the settings, then the
    options. A new run's config; a resumed run takes from it what its folder may not decide."""
    if isinstance(request.config, dict):
        config = apply_mapping(load_config(None, request.preset), request.config, "config")
    else:
        config = load_config(request.config, request.preset)
    return with_flags(config, request)


def with_flags(config: Config, request: RunRequest) -> Config:
    """`config` with the request's settings, then its options, over it."""
    return apply_overrides(apply_settings(config, list(request.settings)), request.overrides, request.data)
