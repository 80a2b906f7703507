"""Run the self-improvement loop on one or more domains.

    python -m run_optimization --domain imo_grading
    python -m run_optimization --domain imo_grading --max_generation 20 --budget_usd 50
    python -m run_optimization --resume_from outputs/RUN    # after a crash, a kill or Ctrl-C

A run folder holds the run's git repository of agent versions (`repo/`), one folder
per node (`nodes/<id>/`: node.json, patch.diff, logs, written by the framework only),
what the node's sandboxes wrote (`untrusted/<id>/`: the meta agent's transcript, the
agent's chat histories), the evaluations (`evals/`), `archive.jsonl` (the event log),
the ledger of every model call and `run.json` (the plan and configuration, reused on
resume).
"""

from __future__ import annotations

import argparse
import atexit
import os
import select
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from archive.records import RunRecord
from optimizer.initial_agents import INITIAL_AGENTS
from optimizer.plan import plan_lines, print_dry_run, summary_lines
from optimizer.transfer import TRANSFERS
from services.config import (
    BASELINES,
    EXECUTORS,
    PROJECT_ROOT,
    SANDBOX_BACKENDS,
    Config,
    int_flag,
    load_config,
    number_flag,
    parse_data_flags,
    validate,
)
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_json, hold_folder, read_bounded
from services.user_files import parse_json

MAX_RUN_RECORD = 2**20  # run.json: the plan and config, a few KiB


def build_parser() -> argparse.ArgumentParser:
    from archive.selection import STRATEGIES

    ap = argparse.ArgumentParser(prog="python -m run_optimization", description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", nargs="+", default=None, help="one or more domains (imo_grading, imo_proof, ...)")
    ap.add_argument("--config", default=None, help="YAML config overriding configs/default.yaml")
    ap.add_argument("--preset", default=None, help="a config of configs/presets/ applied before --config, "
                    "e.g. quick: 2 small generations")
    ap.add_argument("--run_id", default=None, help="run folder name (default: a timestamp)")
    ap.add_argument("--output_dir", default="./outputs", help="parent folder of runs")
    ap.add_argument("--resume_from", default=None, help="a run folder to continue")
    ap.add_argument("--dashboard", nargs="?", type=int_flag(0), const=8765, default=None, metavar="PORT",
                    help="serve this run's live dashboard on 127.0.0.1:PORT (8765; 0: any free port) while it runs")
    ap.add_argument("--max_generation", type=int_flag(0), default=None,
                    help="generations after the initial node (10)")
    ap.add_argument("--eval_samples", type=int_flag(1, also=-1), default=None,
                    help="rows per full evaluation split (-1 = all)")
    ap.add_argument("--eval_workers", type=int_flag(1), default=None, help="rows evaluated in parallel")
    ap.add_argument("--parent_selection", choices=sorted(STRATEGIES), default=None,
                    help="how the next parent is chosen (score_child_prop)")
    ap.add_argument("--seed", type=int, default=None, help="seed of parent selection, to replay a run")
    ap.add_argument("--parallel", type=int_flag(1), default=None,
                    help="generations in flight at once (1); the budget and the gateway are shared")
    ap.add_argument("--skip_staged_eval", action="store_true", default=None, help="no 10-row stage first")
    ap.add_argument("--final_test", action="store_true", default=None,
                    help="at the end, evaluate the test split once, for the node chosen on val and the initial node "
                         "(final_test.json; the loop never reads it); with --resume_from, also for a finished run")
    ap.add_argument("--evaluate", metavar="NODE[,NODE...]", default=None,
                    help="with --resume_from and --split: evaluate that split in full for these nodes of a finished "
                         "run, no generation (evaluations.json; rows already answered are not paid again)")
    ap.add_argument("--split", default=None, help="the split --evaluate evaluates (e.g. test)")
    ap.add_argument("--eval_test", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dry_run", action="store_true",
                    help="print the plan and the cost estimate, then stop: no folder is made and no model called")
    ap.add_argument("--edit_select_parent", action="store_true", default=None,
                    help="the workspace's select_next_parent.py chooses parents")
    ap.add_argument("--run_baseline", choices=BASELINES, default=None, help="a baseline of the paper")
    ap.add_argument("--budget_usd", type=number_flag(0), default=None, help="stop the run once this much is spent")
    ap.add_argument("--meta_model", default=None, help="the meta agent's model (litellm string)")
    ap.add_argument("--task_model", default=None, help="the task agent's model (litellm string)")
    ap.add_argument("--data", action="append", default=None, metavar="DOMAIN=PATH",
                    help="the data file of a domain that is not bundled, e.g. amo_bench=AMO-Bench.jsonl")
    ap.add_argument("--initial_agent", default=None, metavar="NAME|PATH",
                    help=f"the agent the run starts from: {', '.join(sorted(INITIAL_AGENTS))} (task agents; default: "
                         "default), paper (the HyperAgents reference's generic task and meta agents), or the path "
                         "of an agent folder with task_agent:TaskAgent and meta_agent:MetaAgent")
    ap.add_argument("--initial_from", default=None, metavar="RUN[:NODE]",
                    help="start from another run's node (default: its best), on any domain; see --transfer")
    ap.add_argument("--transfer", choices=TRANSFERS, default=None,
                    help="with --initial_from: meta keeps the node's meta agent and agent/ and takes the task agent "
                         "from --initial_agent (the paper's transfer experiment); all keeps the whole node (meta)")
    ap.add_argument("--replicates", type=int_flag(1), default=None, metavar="K",
                    help="K runs of this configuration, seeds --seed (0) to --seed+K-1, into one folder of runs "
                         "(--resume_from it continues them all; python -m archive.analyze reads it)")
    ap.add_argument("--replicates_at_once", type=int_flag(1), default=None, metavar="N",
                    help="with --replicates: runs at once (default 1; all K with --executor ray)")
    ap.add_argument("--sandbox", choices=SANDBOX_BACKENDS, default=None, help="where agent code runs (auto)")
    ap.add_argument("--executor", choices=EXECUTORS, default=None,
                    help="local (default), or ray: every sandbox on a node of a Ray cluster, in that node's backend")
    ap.add_argument("--ray_address", default=None, metavar="ADDR",
                    help="with --executor ray: auto (this machine's cluster), HOST:PORT, or ray://HOST:PORT "
                         "(Ray Client, from outside the cluster; default: a private instance)")
    return ap


LOOP_FLAGS = ("max_generation", "eval_samples", "parent_selection", "seed", "parallel", "skip_staged_eval", "final_test",
              "edit_select_parent", "run_baseline", "initial_agent")


def apply_flags(config: Config, args) -> Config:
    config.harness.data_files.update(parse_data_flags(args.data))
    for name in LOOP_FLAGS:
        if getattr(args, name) is not None:
            setattr(config.loop, name, getattr(args, name))
    for flag, (section, name) in {"budget_usd": ("gateway", "budget_usd"), "eval_workers": ("harness", "num_workers"),
                                  "meta_model": ("models", "meta"), "task_model": ("models", "task"),
                                  "sandbox": ("sandbox", "backend"), "executor": ("sandbox", "executor"),
                                  "ray_address": ("sandbox", "ray_address")}.items():
        if getattr(args, flag) is not None:
            setattr(getattr(config, section), name, getattr(args, flag))
    return validate(config)


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


def load_run(resume_from: str, where: str | None = None, writable: bool = True) -> tuple[Path, RunRecord, Config]:
    """The folder, record and config of a run to resume (or to start from), each checked before
    anything starts."""
    from archive.store import Archive

    run_dir, where = Path(resume_from).resolve(), where or f"--resume_from {resume_from}"
    saved = run_dir / "run.json"
    if not run_dir.is_dir():
        raise UserError(f"{where}: no such folder")
    if (run_dir / "predictions.jsonl").exists() or (run_dir / "predictions.csv").exists():
        raise UserError(f"{where} is an evaluation folder of domains.harness, not a run of run_optimization "
                        f"(continue it with python -m domains.harness --resume_from {resume_from})")
    try:
        state = parse_json(read_bounded(saved, MAX_RUN_RECORD))
    except FileNotFoundError:
        raise UserError(f"{where}: not a run folder (no run.json)") from None
    except OSError as e:
        raise UserError(f"{where}: cannot read {saved}: {e.strerror or e}") from None
    except ValueError as e:
        raise UserError(f"{where}: not a run folder ({saved} is not valid JSON: {e})") from None
    try:
        record = RunRecord.from_dict(state)
    except ValueError as e:
        raise UserError(f"{where}: not a run folder ({saved}: {e})") from None
    try:
        config = Config.from_dict(record.config)
    except UserError as e:
        raise UserError(f"{saved}: {e}") from None
    Archive(run_dir)  # reads every node record: a garbled one stops the resume before the gateway starts
    if writable:
        check_writable(run_dir, where)
    return run_dir, record, config


def initial_code(initial_agent, transfer):
    """How the fresh copy of the project's evolvable code becomes the initial node's: the chosen task
    agent, and with --initial_from the source node's code (all of it, or all but the task agent)."""
    def prepare(workspace: Path) -> None:
        if transfer is not None:
            transfer.apply(workspace)
        if transfer is None or transfer.keep == "meta":
            initial_agent.apply(workspace)
    return prepare


def transfer_of(args, full_sizes):
    """The node a new run starts from (--initial_from, --transfer), checked; None without --initial_from."""
    from domains.base import use_data_files
    from archive.promotion import BestChoice
    from domains.registry import get_domain
    from optimizer.transfer import pick_transfer, split_spec

    if args.initial_from is None:
        if args.transfer is not None:
            raise UserError("--transfer needs --initial_from RUN[:NODE]")
        return None
    if args.resume_from:
        raise UserError("--initial_from starts a new run; a resumed run keeps where it started from")
    keep = args.transfer or "meta"
    if keep == "all" and args.initial_agent is not None:
        raise UserError("--initial_agent has no effect with --transfer all (the node's task agent is kept)")
    folder, node_id = split_spec(args.initial_from)
    run_dir, record, config = load_run(folder, where=f"--initial_from {args.initial_from}", writable=False)
    use_data_files(config.harness.data_files)
    domains = [get_domain(n) for n in record.domains]
    return pick_transfer(run_dir, node_id, domains, full_sizes(domains, config), keep,
                         f"--initial_from {args.initial_from}", BestChoice.of(config.loop))


def start_dashboard(run_dir: Path, port: int) -> None:
    """The run's dashboard (python -m archive.dashboard) in a process of its own, which ends with
    the run, also a killed one. One that cannot start is a warning: the run goes on without it."""
    proc = subprocess.Popen([sys.executable, "-m", "archive.dashboard", str(run_dir), "--port", str(port),
                             "--exit_with", str(os.getpid())], cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, text=True)  # its errors go to this run's stderr
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("dashboard: "):
        proc.kill()
        print("warning: the dashboard did not start (see above); the run goes on without it", flush=True)
        return
    address = line.split()[1]
    print(f"dashboard {address}runs/{quote(run_dir.name)}", flush=True)
    atexit.register(proc.terminate)


def check_flags(args) -> bool:
    """Flags that cannot go together, refused before anything starts; whether --resume_from names a group.
    --evaluate becomes its list of node ids (checked against the run by claim_run)."""
    if args.eval_test:
        raise UserError("--eval_test is gone: the test split is evaluated once, at the end, for the node chosen on "
                        "val: pass --final_test")
    if (args.evaluate is None) != (args.split is None):
        raise UserError("--evaluate NODES and --split SPLIT go together")
    if args.evaluate is not None and (not args.resume_from or args.replicates or args.dry_run):
        raise UserError("--evaluate evaluates nodes of a run: pass --resume_from RUN (no --replicates, no --dry_run)")
    if args.evaluate is not None:
        args.evaluate = [n for n in args.evaluate.split(",") if n]
    group = bool(args.resume_from) and (Path(args.resume_from) / "group.json").exists()
    if args.dry_run and group:
        raise UserError(f"--dry_run plans a run before it starts; {args.resume_from} is a group that has started "
                        "(pass --dry_run --resume_from one of its seed-<s> runs)")
    return group


def claim_run(run_dir: Path, domains, args) -> None:
    """What is refused before any model call: a run another process writes (one at a time), and
    --evaluate of a node or a split the run lacks."""
    if (run_dir / "run.json").exists():
        hold_folder(run_dir, "run")
    if args.evaluate is not None:
        from archive.store import Archive
        from optimizer.final_test import check_evaluate

        check_evaluate(Archive(run_dir).nodes, domains, args.evaluate, args.split)


def run_replicates(parser, args) -> None:
    """--replicates K, or --resume_from a folder of replicates: each replicate a run of its own."""
    from archive.experiments import read_group
    from optimizer.replicates import replicate_argv, run_group, start_group

    if args.resume_from:
        group_dir = Path(args.resume_from).resolve()
        group = read_group(group_dir)
    else:
        if not args.domain:
            raise UserError("pass --domain (e.g. --domain imo_grading), or --resume_from GROUP_DIR")
        group_dir = (Path(args.output_dir) / (args.run_id or datetime.now().strftime("%Y%m%d_%H%M%S"))).resolve()
        check_writable(group_dir, f"--output_dir {args.output_dir}")
        group = start_group(group_dir, replicate_argv(parser, args), args.replicates, args.seed or 0)
    hold_folder(group_dir, "group")  # its runs are held each by its own process
    argv = group["argv"]
    ray = "--executor" in argv[:-1] and argv[argv.index("--executor") + 1] == "ray"
    at_once = args.replicates_at_once or (len(group["runs"]) if ray else 1)
    print(f"group    {group_dir}: {len(group['runs'])} replicates, seeds {', '.join(map(str, group['seeds']))}, "
          f"{at_once} at once" + ("; watch them with python -m archive.dashboard " + str(group_dir)
                                  if args.dashboard is not None else ""), flush=True)
    failed = run_group(group_dir, group, at_once)
    print(f"analyze: python -m archive.analyze {group_dir}", flush=True)
    if failed:
        raise UserError(f"{failed} of {len(group['runs'])} replicates did not finish (see above)")


def main(argv=None) -> None:
    from domains.base import use_data_files
    from domains.registry import get_domain
    from optimizer.estimate import estimate
    from optimizer.evaluation import split_rows
    from optimizer.initial_agents import AgentFolder, get_initial_agent
    from optimizer.loop import Loop
    from services.sandbox import choose_backend_why
    from services.startup import open_services
    from services.workspace import RunRepo

    parser = build_parser()
    args = parser.parse_args(argv)
    group = check_flags(args)
    if not args.dry_run and (args.replicates or group):
        return run_replicates(parser, args)
    transfer = transfer_of(args, lambda ds, cfg: {d.name: split_rows(d, d.selection_split, cfg.loop.eval_samples)
                                                  for d in ds})
    initial_from = transfer.to_dict() if transfer else None
    if args.resume_from:
        run_dir, record, config = load_run(args.resume_from)
        domain_names, initial_from = record.domains, record.initial_from
    else:
        if not args.domain:
            raise UserError("pass --domain (e.g. --domain imo_grading), or --resume_from RUN_DIR")
        config = load_config(args.config, args.preset)
        domain_names = [n for arg in args.domain for n in arg.split(",") if n]
        run_dir = (Path(args.output_dir) / (args.run_id or datetime.now().strftime("%Y%m%d_%H%M%S"))).resolve()
        check_writable(run_dir, f"--output_dir {args.output_dir}")
        if (run_dir / "run.json").exists():
            raise UserError(f"{run_dir} already holds a run: pass --resume_from {run_dir}, or another --run_id")
    config = apply_flags(config, args)
    use_data_files(config.harness.data_files)
    domains = [get_domain(n) for n in domain_names]
    initial_agent = get_initial_agent(config.loop.initial_agent, [d.task or d.name for d in domains])
    if transfer is not None and transfer.keep == "meta" and isinstance(initial_agent, AgentFolder):
        raise UserError(f"--transfer meta takes the meta agent of {args.initial_from} and a task agent of this "
                        f"project; --initial_agent {config.loop.initial_agent} is a whole agent folder")
    if isinstance(initial_agent, AgentFolder) and not initial_agent.bundled:
        config.loop.initial_agent = str(initial_agent.path)  # run.json names the folder, wherever it is read
    for d in domains:
        if "train" not in d.splits:
            raise UserError(f"domain {d.name} has no train split and cannot be optimized")
        d.scorer.check_ready(d)
    if args.dry_run:
        return print_dry_run(run_dir, domains, config, initial_from, args.replicates)
    claim_run(run_dir, domains, args)
    services = open_services(config, run_dir, [] if args.evaluate is not None else ["meta"], preflight=True)
    services.require(*(model for d in domains for model in d.models_needed(config)))
    backend, why_backend = choose_backend_why(config.sandbox)
    resumed = (run_dir / "run.json").exists()
    costs = estimate(domains, config, lambda d, split: split_rows(d, split, config.loop.eval_samples))
    print("\n".join(plan_lines(run_dir, domains, config, backend, resumed, services.why_models, why_backend,
                               initial_from) + ([] if args.evaluate is not None else [costs.line()])), flush=True)
    first = costs.initial_usd + costs.generation_usd
    if config.gateway.budget_usd is not None and not resumed and config.gateway.budget_usd < first:
        print(f"warning: the budget of ${config.gateway.budget_usd:g} is below the estimate for the initial "
              f"evaluation and one generation (~${first:.2f}): the run will likely stop before its first child "
              "is scored; raise --budget_usd or lower --eval_samples", flush=True)

    with services:  # a new run folder is removed again if the preflight calls fail
        hold_folder(run_dir, "run")  # a new run's folder exists from here on
        gateway = services.gateway
        if not resumed:
            RunRepo.create(run_dir / "repo", PROJECT_ROOT, initial_code(initial_agent, transfer))
        atomic_write_json(run_dir / "run.json", RunRecord(domain_names, config.to_dict(), backend,
                                                          initial_from).to_dict())
        if args.dashboard is not None:
            start_dashboard(run_dir, args.dashboard)
        loop = Loop(run_dir, config, domains, gateway, backend)
        if args.evaluate is not None:
            from optimizer.final_test import run_evaluations

            print("\n".join(run_evaluations(loop, args.evaluate, args.split)))
        else:
            loop.run()
            print("\n".join(summary_lines(loop)))
        stopped = gateway.budget_left_message()
        if stopped:
            print(f"stopped: {stopped}; raise --budget_usd and rerun with --resume_from {run_dir} to continue")


if __name__ == "__main__":
    exit_on_user_error(main)
