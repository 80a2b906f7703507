"""Starting, resuming or evaluating one run from a typed request: what `python -m run_optimization`
and the Python API (`hyperagents.run`) both do once their inputs are read, so both check the same
things in the same order (config, flags, domains, the run folder and its lock) and both refuse bad
input with the same one-line UserError before anything is made or paid for."""

from __future__ import annotations

import atexit
import copy
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast
from urllib.parse import quote

from archive.records import RUN_JSON, RunRecord
from archive.run_folder import accepting_flags, ledger_of, read_run_record, resumed_config, saved_config, settle_resume
from optimizer.plan import RunPlan, dry_run_plan, plan_lines, summary_lines
from optimizer.request import FLAG_FIELDS, RunRequest, command_config, labels, with_flags
from services.config import PROJECT_ROOT, Config
from services.errors import ProviderDown, Terminated, UserError, advise
from services.fsutil import atomic_write_json, hold_folder
from services.render import console

if TYPE_CHECKING:
    from domains.base import Domain
    from optimizer.events import Draw
    from optimizer.initial_agents import AgentFolder, InitialAgent
    from optimizer.loop import Loop
    from optimizer.transfer import Transfer
    from services.gateway import Gateway


def check_writable(path: Path, flag: str) -> None:
    """Refuse, before anything is created, a folder that cannot be made or written: the nearest
    existing ancestor of `path` (or `path` itself) must be a writable folder."""
    existing = path
    while not os.path.lexists(existing):  # lexists: a dangling link is in the way too
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{flag}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag}: {existing} is not writable")


def open_run(resume_from: str | Path, command: Config, where: str | None = None,
             writable: bool = True) -> tuple[Path, RunRecord, Config]:
    """The folder, record and config of a run to resume (or to start from), each checked before
    anything starts. The folder is someone's data (archive/run_folder.py): where code runs and data
    goes is `command`'s (the defaults, --preset, --config, --set and flags), or the folder's where that
    asks for nothing more; otherwise a UserError naming the flag that accepts what it asks for."""
    from archive.store import Archive

    run_dir, where = Path(resume_from).resolve(), where or f"--resume_from {resume_from}"
    if not run_dir.is_dir():
        raise UserError(f"{where}: no such folder")
    if (run_dir / "predictions.jsonl").exists() or (run_dir / "predictions.csv").exists():
        raise UserError(f"{where} is an evaluation folder of domains.harness, not a run of run_optimization: "
                        f"continue it with `python -m domains.harness --resume_from {shlex.quote(str(resume_from))}`")
    record = read_run_record(run_dir, where)
    config = resumed_config(saved_config(record, Path(resume_from)), command, Path(resume_from) / RUN_JSON)
    Archive(run_dir)  # reads every node record: a garbled one stops the resume before the gateway starts
    ledger_of(run_dir).tables()  # a ledger of another shape stops it too, before anything opens it to write
    if writable:
        check_writable(run_dir, where)
    return run_dir, record, config


def initial_code(initial_agent: InitialAgent | AgentFolder, transfer: Transfer | None) -> Callable[[Path], None]:
    """How the fresh copy of the project's evolvable code becomes the initial node's: the chosen task
    agent, and with --initial_from the source node's code (all of it, or all but the task agent)."""
    def prepare(workspace: Path) -> None:
        if transfer is not None:
            transfer.apply(workspace)
        if transfer is None or transfer.keep == "meta":
            initial_agent.apply(workspace)
    return prepare


def transfer_of(request: RunRequest, command: Config,
                full_sizes: Callable[[list[Domain], Config], dict[str, int]]) -> Transfer | None:
    """The node a new run starts from (--initial_from, --transfer), checked; None without --initial_from."""
    from archive.promotion import BestChoice
    from domains.base import use_data_files
    from domains.registry import run_domains
    from optimizer.transfer import pick_transfer, split_spec

    if request.initial_from is None:
        if request.transfer is not None:
            raise UserError("--transfer needs --initial_from RUN[:NODE]")
        return None
    if request.resume_from:
        raise UserError("--initial_from starts a new run; a resumed run keeps where it started from")
    keep = request.transfer or "meta"
    if keep == "all" and request.overrides.get("initial_agent") is not None:
        raise UserError("--initial_agent has no effect with --transfer all (the node's task agent is kept)")
    folder, node_id = split_spec(request.initial_from)
    run_dir, record, config = open_run(folder, command, where=f"--initial_from {request.initial_from}", writable=False)
    use_data_files(config.harness.data_files)
    domains = run_domains(record.domains, run_dir)
    return pick_transfer(run_dir, node_id, domains, full_sizes(domains, config), keep,
                         f"--initial_from {request.initial_from}", BestChoice.of(config.loop, config.search))


def start_dashboard(run_dir: Path, port: int) -> None:
    """The run's dashboard (python -m apps.dashboard) in a process of its own, which ends with
    the run, also a killed one. One that cannot start is a warning: the run goes on without it."""
    proc = subprocess.Popen([sys.executable, "-m", "apps.dashboard", str(run_dir), "--port", str(port),
                             "--exit_with", str(os.getpid())], cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, text=True)  # its errors go to this run's stderr
    stdout = cast(IO[str], proc.stdout)  # a pipe: stdout=PIPE above
    ready, _, _ = select.select([stdout], [], [], 30)
    line = stdout.readline() if ready else ""
    if not line.startswith("dashboard: "):
        proc.kill()
        print("warning: the dashboard did not start (see above); the run goes on without it", flush=True)
        return
    address = line.split()[1]
    print(f"dashboard {address}runs/{quote(run_dir.name)}", flush=True)
    atexit.register(proc.terminate)


def claim_run(run_dir: Path, domains: list[Domain], request: RunRequest) -> None:
    """What is refused before any model call: a run another process writes (one at a time), and
    --evaluate of a node or a split the run lacks."""
    if (run_dir / "run.json").exists():
        hold_folder(run_dir, "run")
    if request.evaluate is not None:
        from archive.store import Archive
        from optimizer.final_test import check_evaluate

        check_evaluate(Archive(run_dir).nodes, domains, list(request.evaluate), cast(str, request.split))


def new_run_dir(request: RunRequest) -> Path:
    """A new run's folder, checked: writable, and holding no run yet."""
    run_dir = (Path(request.output_dir) / (request.run_id or datetime.now().strftime("%Y%m%d_%H%M%S"))).resolve()
    check_writable(run_dir, f"--output_dir {request.output_dir}")
    if (run_dir / "run.json").exists():
        raise UserError(f"{run_dir} already holds a run: pass --resume_from {run_dir}, or another --run_id")
    return run_dir


def python_command() -> str:
    """`python` when that name finds this interpreter (an activated virtualenv), else its full path."""
    found = shutil.which("python")
    try:
        return "python" if found and os.path.samefile(found, sys.executable) else sys.executable
    except OSError:
        return sys.executable


def resume_command(run_dir: Path, request: RunRequest, config: Config | None = None) -> str:
    """The command, shell-quoted, that continues the run in `run_dir` as `request` ran it: run.json keeps
    the config with every flag applied, so only what it does not keep is given again (--evaluate and
    its split, the dashboard's port), and the flags that accept what a resume takes from the command
    line alone (its own --sandbox none, trackers, addresses: archive/run_folder.py)."""
    argv = [python_command(), "-m", "run_optimization", "--resume_from", str(run_dir),
            *(accepting_flags(config) if config is not None else [])]
    if request.evaluate is not None:
        argv += ["--evaluate", ",".join(request.evaluate), "--split", str(request.split)]
    if request.dashboard is not None:
        argv += ["--dashboard", str(request.dashboard)]
    return shlex.join(argv)


@contextmanager
def resumable(run_dir: Path, request: RunRequest, config: Config | None = None) -> Iterator[None]:
    """A stop within (Ctrl-C, SIGTERM, a provider's outage) carries what to do next: the exact command
    that resumes once run.json exists, else that nothing is kept to resume."""
    try:
        yield
    except (KeyboardInterrupt, Terminated, ProviderDown) as e:
        down = isinstance(e, ProviderDown)  # its line says already that nothing of the failed rows was kept
        if (run_dir / "run.json").exists():
            saved = "" if down else "progress so far is saved; "
            advise(e, f"{saved}to continue: {resume_command(run_dir, request, config)}")
        elif not down:
            advise(e, "the run had not started, so there is nothing to resume: run the same command again")
        raise


def check_optimizable(domains: list[Domain]) -> None:
    """Each domain has a train split to optimize on and a scorer ready to score it; else a UserError."""
    for d in domains:
        if "train" not in d.splits:
            raise UserError(f"domain {d.name} has no train split and cannot be optimized")
        d.scorer.check_ready(d)


def run_of(request: RunRequest, command: Config, specs: list[str]) -> tuple[Path, RunRecord | None, list[str],
                                                                          Config]:
    """The run's folder, its record when it resumes, its domains and its config."""
    if request.resume_from:
        run_dir, record, resumed = open_run(request.resume_from, command)
        given = list(dict.fromkeys(n for arg in request.domains for n in arg.split(",") if n))
        if given and set(given) != set(record.domains):
            raise UserError(f"--domain {' '.join(given)}: a resume keeps the run's domains "
                            f"({', '.join(record.domains)}); for others, start a new run (--initial_from "
                            f"{request.resume_from} starts it from this run's best node)")
        return run_dir, record, record.domains, resume_config(resumed, command, request)
    domain_names = list(dict.fromkeys([n for arg in request.domains for n in arg.split(",") if n] + specs))
    if not domain_names:
        raise UserError("pass --domain (e.g. --domain imo_grading) or --domain_spec FILE, or --resume_from RUN_DIR")
    return new_run_dir(request), None, domain_names, command


def resume_config(run: Config, command: Config, request: RunRequest) -> Config:
    """A resumed run's config: its own (`run`, where code runs and data goes already the command's) with the
    command's --set and flags over it, checked for what a resume cannot change, with a note of what --config or
    --preset asked for that a resume does not take (archive/run_folder.py settle_resume)."""
    config = with_flags(copy.deepcopy(run), request)
    flags = {".".join(FLAG_FIELDS[o]): f"--{o}" for o, v in request.overrides.items() if v is not None}
    if note := settle_resume(run, config, command, flags, request.resume_from):
        print(console(note), flush=True)
    return config


def run_or_evaluate(loop: Loop, request: RunRequest, started: float, name: str, tags: list[str]) -> None:
    """What a run does once it is open: --evaluate's evaluations, or the loop within its time limit (counted from
    `started`) and its summary; then the line that continues a run the budget or the time limit stopped."""
    from optimizer.time_limit import run_within, stopped_line

    run_dir, config = loop.ctx.run_dir, loop.ctx.config
    if request.evaluate is not None:
        from optimizer.final_test import run_evaluations
        from services.workspace import discard

        discard(run_dir / "workspaces")  # a killed run's, or a link a handed folder planted there

        print("\n".join(map(console, run_evaluations(loop, list(request.evaluate), cast(str, request.split)))))
    else:
        limited = run_within(config.loop.max_minutes, started, loop.run)
        print("\n".join(summary_lines(loop, name, tags)))
        if limited:
            print(console(stopped_line(cast(float, config.loop.max_minutes),
                                       resume_command(run_dir, request, config))), flush=True)
    stopped = loop.ctx.gateway.budget_left_message()
    if stopped:
        print(console(f"stopped: {stopped}; to continue with more: {resume_command(run_dir, request, config)} "
                      "--budget_usd USD"))


@dataclass
class Prepared:
    """A run as checked before anything is made or paid for: its folder, config, domains, where its initial
    node comes from, and its labels. A dry run prints it; a run opens it."""

    request: RunRequest
    run_dir: Path
    config: Config
    domains: list[Domain]
    domain_names: list[str]
    record: RunRecord | None  # a resumed run's run.json
    initial_agent: InitialAgent | AgentFolder | None  # None on a resume: the initial node is in the repository
    transfer: Transfer | None
    name: str
    tags: list[str]

    @property
    def initial_from(self) -> dict | None:
        record, transfer = self.record, self.transfer
        return record.initial_from if record else transfer.to_dict() if transfer else None


def prepare(request: RunRequest) -> Prepared:
    """Everything `request` asks for, checked in order (config, flags, domains, the run folder, plug-ins) before
    anything is made; a UserError for the first problem."""
    from domains.base import use_data_files
    from domains.registry import config_domains, run_domains, use_domain_specs
    from optimizer.evaluation import split_rows
    from optimizer.initial_agents import AgentFolder, get_initial_agent, with_meta_agent
    from optimizer.trackers import require as require_trackers
    from search.registry import load_named
    from services.coding_agents import require_meta_agent

    config = command_config(request)
    if not (request.resume_from or request.domains or request.domain_specs) and config.loop.domains:
        names, files = config_domains(config.loop.domains)  # a new run naming no domain: its config's
        request = replace(request, domains=names, domain_specs=files)
    specs = use_domain_specs([os.path.abspath(p) for p in request.domain_specs], request.resume_from)
    transfer = transfer_of(request, config, lambda ds, cfg: {d.name: split_rows(d, d.selection_split,
                                                                                 cfg.loop.eval_samples) for d in ds})
    run_dir, record, domain_names, config = run_of(request, config, specs)
    require_trackers(config.tracking.backends)  # a tracker's missing extra, before anything starts
    name, tags = labels(request, record)
    use_data_files(config.harness.data_files)
    domains = run_domains(domain_names, run_dir)  # a resumed run's spec domains are kept in its folder
    if record is None:
        with_meta_agent(config)
    if request.evaluate is None:  # one line, before anything starts (a dry run's plan only needs no install)
        require_meta_agent(config.models.meta_agent, config.sandbox.executor, config.sandbox.backend,
                           installed=not request.dry_run)
    # A resumed run's initial node is in its repository: the path its folder names is never read here.
    initial_agent = None if record else get_initial_agent(
        config.loop.initial_agent, [d.task or d.name for d in domains], config.loop.initial_meta_agent)
    if transfer is not None and transfer.keep == "meta" and isinstance(initial_agent, AgentFolder):
        raise UserError(f"--transfer meta takes the meta agent of {request.initial_from} and a task agent of this "
                        f"project; --initial_agent {config.loop.initial_agent} is a whole agent folder")
    if isinstance(initial_agent, AgentFolder) and not initial_agent.bundled:
        config.loop.initial_agent = str(initial_agent.path)  # run.json names the folder, wherever it is read
    check_optimizable(domains)
    load_named(config, [s.rule for d in domains for s in d.screening(config.loop) if s.rule])  # plug-ins load
    return Prepared(request, run_dir, config, domains, domain_names, record, initial_agent, transfer, name, tags)


def launch(request: RunRequest, draw: Draw | None = None) -> Path:
    """Start, resume or evaluate the run `request` names; its folder (nothing is made for a dry run). `draw` draws
    the run's report and plots as it goes (apps.pictures.draw; None: none)."""
    started = time.monotonic()  # where loop.max_minutes counts from
    run = prepare(request)
    if request.dry_run:
        print(plan_of(run).text())
    else:
        open_and_run(run, started, draw)
    return run.run_dir


def plan_of(run: Prepared) -> RunPlan:
    """The plan of a prepared run, as --dry_run prints it: nothing made, no model called."""
    return dry_run_plan(run.run_dir, run.domains, run.config, run.initial_from, run.request.replicates, run.name,
                        run.tags)


def open_and_run(run: Prepared, started: float, draw: Draw | None = None) -> None:
    """The prepared run's folder claimed, its services open and checked, its plan printed, then the run."""
    from domains.registry import keep_specs
    from optimizer.context import RunContext
    from optimizer.estimate import estimate
    from optimizer.evaluation import split_rows
    from optimizer.heldout import check_heldout, heldout_models
    from optimizer.loop import Loop
    from services.sandbox import choose_backend_why
    from services.startup import open_services
    from services.workspace import RunRepo

    request, run_dir, config, domains = run.request, run.run_dir, run.config, run.domains
    claim_run(run_dir, domains, request)
    services = open_services(config, run_dir, preflight=True)  # fills the `auto` models, so they resolve below
    services.require(*([] if request.evaluate is not None else config.meta_models()))
    check_heldout(domains, config)  # once `auto` models are chosen: the held-out grader is not the grader
    services.require(*(model for d in domains for model in d.models_needed(config)), *heldout_models(domains, config))
    backend, why_backend = choose_backend_why(config.sandbox)
    resumed = (run_dir / "run.json").exists()
    costs = estimate(domains, config, lambda d, split: split_rows(d, split, config.loop.eval_samples))
    print("\n".join(plan_lines(run_dir, domains, config, backend, resumed, services.why_models, why_backend,
                               run.initial_from, run.name, run.tags)
                    + ([] if request.evaluate is not None else [costs.line()])), flush=True)
    first = costs.initial_usd + costs.generation_usd
    if config.gateway.budget_usd is not None and not resumed and config.gateway.budget_usd < first:
        print(f"warning: the budget of ${config.gateway.budget_usd:g} is below the estimate for the initial "
              f"evaluation and one generation (~${first:.2f}): the run will likely stop before its first child "
              "is scored; raise --budget_usd or lower --eval_samples", flush=True)
    with resumable(run_dir, request, config), services:  # a new run folder is removed again if the preflight fails
        hold_folder(run_dir, "run")  # a new run's folder exists from here on
        gateway = cast("Gateway", services.gateway)  # open from here on
        if not resumed:
            RunRepo.create(run_dir / "repo", PROJECT_ROOT, initial_code(cast("InitialAgent | AgentFolder",
                                                                             run.initial_agent), run.transfer))
        atomic_write_json(run_dir / "run.json", RunRecord(run.domain_names, config.to_dict(), backend,
                                                          run.initial_from, run.name, run.tags).to_dict())
        keep_specs(run_dir, domains)
        if request.dashboard is not None:
            start_dashboard(run_dir, request.dashboard)
        ctx = RunContext.open(run_dir, config, domains, gateway, backend)
        run_or_evaluate(Loop(ctx, draw=draw), request, started, run.name, run.tags)
