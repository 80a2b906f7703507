"""A run folder someone handed over, read as data: the one way every reader opens one (a resume,
--evaluate, --initial_from, apps.analyze, apps.ensemble, the dashboard, hyperagents.load_run,
setup_proofgrader_repo --generate_dir, the trackers).

A folder may say what the run is about: its domains, the loop's knobs, the models' names, the
budget, its name and tags (`DATA`). It may not decide where code runs, where data goes, what the
host reads or what a dollar of the budget buys (`GUARDED`: its `gateway.prices` would price a known
model at 0 and so lift --budget_usd): those come from the user's command (its flags, --set,
--config, --preset) or the defaults. When a folder's run.json asks for one of them where the command is silent, it is
kept only if it asks for nothing the command does not already give (a resumed run on bwrap stays
on bwrap); otherwise the resume is refused in one line naming the flag that accepts it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shlex
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from archive.records import RUN_JSON, RunRecord
from services.config import Config, load_config
from services.errors import UserError
from services.ledger import LedgerReader

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _quoted(value: object) -> str:
    return shlex.quote(str(value))


@dataclass(frozen=True)
class Guard:
    """A field the folder may not decide alone."""

    does: str  # what the folder's value would do, in the refusal's words
    weaker: Callable[[object, object], bool]  # (the folder's value, the command's) -> it asks for more
    accept: Callable[[object], str]  # the folder's value -> the flags that accept it


def _set(key: str) -> Callable[[object], str]:
    return lambda value: f"--set {key}={_quoted(value)}"


def _data_flags(value: object) -> str:
    return " ".join(f"--data {_quoted(f'{d}={p}')}" for d, p in dict(value).items())  # type: ignore[call-overload]


def _new_files(folder: object, command: object) -> bool:
    return any(command.get(d) != p for d, p in dict(folder).items())  # type: ignore[call-overload, union-attr]


GUARDED: dict[str, Guard] = {
    "sandbox.backend": Guard("agent code on this host, outside any sandbox", lambda f, c: f == "none",
                             lambda v: f"--sandbox {_quoted(v)}"),
    "sandbox.executor": Guard("agent code on the machines of a Ray cluster", lambda f, c: f == "ray",
                              lambda v: f"--executor {_quoted(v)}"),
    "sandbox.ray_address": Guard("the Ray cluster it names", lambda f, c: f is not None,
                                 lambda v: f"--ray_address {_quoted(v)}"),
    "sandbox.docker_image": Guard("a Docker image it names (pulled from a registry it names)",
                                  lambda f, c: f != c, _set("sandbox.docker_image")),
    "sandbox.docker_host": Guard("the Docker engine it names", lambda f, c: f is not None,
                                 _set("sandbox.docker_host")),
    "gateway.host": Guard("the gateway, which holds your provider keys, listening beyond this machine",
                          lambda f, c: f not in LOOPBACK, _set("gateway.host")),
    "harness.data_files": Guard("files of this host read as data sets and sent to agents and models",
                                _new_files, _data_flags),
    "tracking.backends": Guard("trackers that import their libraries and write where they keep runs",
                               lambda f, c: bool(set(f) - set(c)),  # type: ignore[call-overload]
                               lambda v: f"--track {_quoted(','.join(v))}"),  # type: ignore[call-overload]
    "tracking.mlflow_uri": Guard("uploads to the MLflow server it names, with your MLFLOW_TRACKING_TOKEN",
                                 lambda f, c: f is not None, _set("tracking.mlflow_uri")),
    "tracking.wandb_mode": Guard("uploads to W&B with your WANDB_API_KEY", lambda f, c: f == "online",
                                 _set("tracking.wandb_mode")),
    "tracking.wandb_entity": Guard("uploads to the W&B team it names", lambda f, c: f is not None,
                                   _set("tracking.wandb_entity")),
    "gateway.prices": Guard("prices of its own for the models, which decide where --budget_usd stops the run",
                            lambda f, c: f != c, lambda v: f"--set gateway.prices={_quoted(json.dumps(v))}"),
}

# Every other field of services.config, each what a run is about rather than where it runs.
DATA = frozenset({
    "models.task", "models.meta", "models.grader", "models.judge", "models.heldout_grader", "models.meta_agent",
    "gateway.port", "gateway.max_retries", "gateway.breaker_failures", "gateway.backoff_base_s",
    "gateway.backoff_max_s", "gateway.request_timeout_s", "gateway.cache", "gateway.prompt_caching",
    "gateway.budget_usd", "gateway.budget_tokens", "gateway.max_concurrent_calls", "gateway.requests_per_minute",
    "gateway.max_output_tokens", "gateway.max_n", "gateway.max_request_mb", "gateway.local_context",
    "gateway.local_threads",
    "harness.num_workers", "harness.save_interval", "harness.row_timeout_s", "harness.start_timeout_s",
    "harness.max_prediction_bytes", "harness.label_case",
    "sandbox.memory_mb", "sandbox.pids", "sandbox.cpus", "sandbox.cpu_seconds", "sandbox.file_size_mb",
    "sandbox.disk_mb", "sandbox.tmp_mb", "sandbox.output_cap_mb",
    "tracking.experiment", "tracking.text_kb",
    *(f"loop.{f.name}" for f in dataclasses.fields(Config().loop)),
    "search",  # the strategies' own settings: numbers and names, never a place (search.registry checks each)
})

# What a resume may not change, and why: the measure every node of the run was scored with, and what is
# read only when a run starts. Every other field of DATA a resume's command line changes from then on.
FIXED_ON_RESUME = {
    "models.task": "every node of the run was scored with it",
    "models.grader": "every node of the run was graded with it",
    "models.judge": "every node of the run was judged with it",
    "models.heldout_grader": "the run's held-out grades are all of it",
    "loop.eval_samples": "every node of the run was scored on that many rows",
    "loop.row_error": "every node of the run was scored under it",
    "harness.label_case": "every node of the run was scored under it",
    "loop.seed": "the run's parent choices replay from it",
    "loop.run_baseline": "the run measures that baseline",
    "loop.domains": "a resume keeps the run's domains",
    "loop.initial_agent": "it is read when a run starts: the run's initial node is in its repository",
    "loop.initial_meta_agent": "it is read when a run starts: the run's initial node is in its repository",
}
# What a resume takes from its own command alone, never from the folder: a limit counted from the command's start.
PER_COMMAND = ("loop.max_minutes",)

# Fields named like an address, a path or a backend that are data all the same, and why.
NAMED_LIKE_A_PLACE = {
    "gateway.port": "a port of the gateway's own host (gateway.host decides which host)",
    "loop.initial_agent": "read only when a run starts: a resumed run's initial node is in its repository, and "
                          "--initial_from takes the new run's own",
    "loop.try_command": "whether the meta agent may run the task agent on train rows, in its own sandbox",
    "loop.initial_meta_agent": "read only when a run starts, and only names a bundled meta agent (default or paper)",
    "models.meta_agent": "names a meta agent of this project or of a plug-in the user installed, which runs in the "
                         "run's sandbox like any meta agent (a coding agent's program from the project's own install "
                         "folder, read-only)",
    "loop.domains": "read only when a new run names no domain, from the command's own config (a resume keeps its "
                    "run's domains; a group's replicates take a spec file only when the command names it)",
}


def value_of(config: Config, key: str) -> object:
    """The value of SECTION.KEY, or of a whole section of no fixed keys (`search`)."""
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name) if name else getattr(config, section)


def _set_value(config: Config, key: str, value: object) -> None:
    section, _, name = key.partition(".")
    setattr(getattr(config, section), name, value) if name else setattr(config, section, value)


def read_run_record(run_dir: Path, where: str | None = None) -> RunRecord:
    """run.json as the core wrote it, the spec domains kept beside it made known (domains/spec.py); a
    UserError starting with `where` (the run folder as the user named it) otherwise."""
    from domains.registry import use_run_domains

    where, saved = where or str(run_dir), Path(run_dir) / RUN_JSON
    try:
        record = RunRecord.read(run_dir)
    except FileNotFoundError:
        raise UserError(f"{where}: not a run folder (no {RUN_JSON})") from None
    except OSError as e:
        raise UserError(f"{where}: cannot read {saved}: {e.strerror or e}") from None
    except ValueError as e:
        raise UserError(f"{where}: not a run folder ({saved}: {str(e)[:300]})") from None
    use_run_domains(run_dir)
    return record


def saved_config(record: RunRecord, run_dir: Path) -> Config:
    """The config run.json holds, checked, as it is (guarded fields included: for comparison only)."""
    try:
        return Config.from_dict(record.config)
    except UserError as e:
        raise UserError(f"{Path(run_dir) / RUN_JSON}: {e}") from None


def data_config(record: RunRecord, run_dir: Path) -> Config:
    """run.json's config with every guarded field at the defaults: what a reader that only shows, scores
    or combines a run's results may take from it."""
    return resumed_config(saved_config(record, run_dir), load_config(), Path(run_dir) / RUN_JSON, refuse=False)


def resumed_config(saved: Config, command: Config, source: Path, refuse: bool = True) -> Config:
    """`saved` (the config of `source`, a folder's run.json or group.json) with each guarded field from
    `command` (the defaults, --preset, --config, --set and flags of this command): the command's value
    where it differs from the defaults (the user chose it), else the folder's where that asks for nothing
    more than the command gives, else a UserError in one line naming the flags that accept what the
    folder asks for (or, without `refuse`, the command's value)."""
    defaults, asked = load_config(), []
    config = copy.deepcopy(saved)  # every section its own, so setting a guarded field leaves `saved` as it was
    for key, guard in GUARDED.items():
        mine, theirs = value_of(command, key), value_of(saved, key)
        if mine != value_of(defaults, key) or theirs == mine:
            _set_value(config, key, mine)
        elif guard.weaker(theirs, mine):
            asked.append((key, theirs))
            _set_value(config, key, mine)
    if asked and refuse:
        wants = "; ".join(f"{GUARDED[k].accept(v)} ({GUARDED[k].does})" for k, v in asked)
        flags = " ".join(GUARDED[k].accept(v) for k, v in asked)
        raise UserError(f"{source} asks for {wants}; pass {flags} to accept "
                        f"{'it' if len(asked) == 1 else 'them'}")
    return config


def _same(key: str, theirs: object, mine: object) -> bool:
    """Whether a resume's value of `key` is the run's: an agent folder named by another path to it is."""
    if key == "loop.initial_agent" and isinstance(theirs, str) and isinstance(mine, str):
        return os.path.realpath(os.path.expanduser(theirs)) == os.path.realpath(os.path.expanduser(mine))
    return theirs == mine


def settle_resume(run: Config, config: Config, command: Config, flags: dict[str, str],
                  resume_from: object) -> str | None:
    """A resume's `config` (the run's own, `run`, with the command's --set and flags over it) made final: the fields
    of PER_COMMAND from `command` alone; a UserError in one line for a field of FIXED_ON_RESUME it changes
    (`flags`: key -> the flag that gave it, when one did; a model role given as auto keeps the run's model); and
    a note of what --config or --preset ask for that a resume does not take (their fields of DATA count for a new
    run only: each field `command` sets off its default that `config` does not hold), or None."""
    for key in PER_COMMAND:
        _set_value(config, key, value_of(command, key))
    for key in FIXED_ON_RESUME:
        theirs, mine = value_of(run, key), value_of(config, key)
        if key.startswith("models.") and mine == "auto":
            _set_value(config, key, theirs)
        elif not _same(key, theirs, mine):
            given = f"{flags[key]} {mine}" if key in flags else f"--set {key}={mine}"
            raise UserError(f"{given}: a resume cannot change {key} (the run's: {theirs}): {FIXED_ON_RESUME[key]}; "
                            f"for another, start a new run (--initial_from {resume_from} starts it from this run's "
                            "best node)")
    defaults = load_config()
    skipped = [(key, value_of(command, key), value_of(config, key)) for key in sorted(DATA)
               if value_of(command, key) != value_of(defaults, key) and value_of(config, key) != value_of(command, key)]
    if not skipped:
        return None
    return ("note: a resume keeps the run's own " + ", ".join(f"{k} {kept!s}" for k, _, kept in skipped)
            + " where --config or --preset ask for " + ", ".join(f"{asked!s}" for _, asked, _ in skipped)
            + " (on a resume they decide where code runs and data goes; --set or a flag changes the rest)")


def accepting_flags(config: Config) -> list[str]:
    """The flags a plain resume of a run with `config` would be refused without (its own --sandbox none,
    trackers, addresses), for the command that continues it."""
    defaults = load_config()
    flags = [GUARDED[k].accept(value_of(config, k)) for k, g in GUARDED.items()
             if value_of(config, k) != value_of(defaults, k) and g.weaker(value_of(config, k), value_of(defaults, k))]
    return [part for flag in flags for part in shlex.split(flag)]


def ledger_of(run_dir: Path) -> LedgerReader:
    """The run's ledger, read as a stranger's (services.ledger.LedgerReader: read-only, schema-checked,
    under a deadline)."""
    return LedgerReader(Path(run_dir) / "ledger.sqlite")


@contextmanager
def repository_read(run_dir: Path, commit: str) -> Iterator[None]:
    """Git failing on a run's repository (an object missing from a handed folder, a garbled pack, a
    command past its deadline) as one line naming the repository and the commit."""
    try:
        yield
    except subprocess.CalledProcessError as e:
        lines = bytes(e.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else f"exit {e.returncode}"
        raise UserError(f"{Path(run_dir) / 'repo'}: cannot give commit {commit[:12]} (git: {why[:200]})") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{Path(run_dir) / 'repo'}: git took too long to give commit {commit[:12]}") from None
