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
import contextlib
import io
import os
import shlex
import sys
from datetime import datetime
from pathlib import Path

from apps import pictures
from optimizer.initial_agents import INITIAL_AGENTS
from optimizer.launch import (
    check_writable,
    launch,
    python_command,
    start_dashboard,  # noqa: F401  (where tests and older callers find it)
)
from optimizer.request import FLAG_FIELDS, RunRequest, apply_overrides, command_config
from optimizer.transfer import TRANSFERS
from services.cli_parser import ArgumentParser
from services.config import BASELINES, EXECUTORS, SANDBOX_BACKENDS, Config
from services.errors import EXIT_MACHINE_DOWN, EXIT_PROVIDER_DOWN, Terminated, UserError, advise, exit_on_user_error
from services.flags import int_flag, number_flag
from services.fsutil import hold_folder
from services.meta_agent_names import meta_agent_names
from services.strategy_names import strategy_names


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m run_optimization", description=(__doc__ or "").split("\n\n")[0])
    for add in (_run_flags, _loop_flags, _mode_flags, _start_flags):
        add(ap)
    return add_where_flags(ap)


def _run_flags(ap: argparse.ArgumentParser) -> None:
    """Which run: its domains, config, labels and folder."""
    group = ap.add_argument_group("the run")
    group.add_argument("--domain", nargs="+", default=None, help="one or more domains (imo_grading, imo_proof, ...)")
    group.add_argument("--domain_spec", action="append", type=os.path.abspath, default=None, metavar="FILE",
                       help="a domain of your own, written as a YAML spec (docs/domains.md); repeatable. With "
                            "--resume_from: the spec the run was started with, checked against what the run kept "
                            "(needed when its scorer is a function of your own: a run folder never names one)")
    group.add_argument("--config", default=None, help="YAML config overriding configs/default.yaml")
    group.add_argument("--preset", default=None, help="a config of configs/presets/ applied before --config, "
                       "e.g. quick: 2 small generations")
    group.add_argument("--set", action="append", default=None, metavar="SECTION.KEY=VALUE", dest="settings",
                       help="one config field, after --preset and --config and before the flags below, e.g. --set "
                            "loop.promotion=not_worse_than_parent (VALUE is YAML: 8, null, [a, b]; repeatable)")
    group.add_argument("--name", default=None, help="the run's name, kept in run.json and shown in lists of runs")
    group.add_argument("--tag", action="append", default=None, dest="tags", metavar="TAG",
                       help="a label to find and group runs by (repeatable)")
    group.add_argument("--run_id", default=None, help="run folder name (default: a timestamp)")
    group.add_argument("--output_dir", default=None, help="parent folder of runs (./outputs)")
    group.add_argument("--resume_from", default=None, help="a run folder to continue; a flag given with it counts from "
                       "there on, or is refused in one line (docs/running.md, What a resume takes from the run folder)")
    group.add_argument("--dashboard", nargs="?", type=int_flag(0), const=8765, default=None, metavar="PORT",
                       help="serve this run's live dashboard on 127.0.0.1:PORT (8765; 0: any free port) while it runs")


def _loop_flags(ap: argparse.ArgumentParser) -> None:
    """How the loop goes: its length, evaluation, selection and test."""
    group = ap.add_argument_group("the loop")
    group.add_argument("--max_generation", type=int_flag(0), default=None,
                       help="generations after the initial node (10); with --resume_from, lower or higher than "
                            "the run's")
    group.add_argument("--max_minutes", type=number_flag(0), default=None, metavar="N",
                       help="stop the run N minutes after this command started (a resume counts afresh, with no "
                            "limit unless given one): generations in flight stop as on Ctrl-C, resumably, and the "
                            "last line is the command that continues")
    group.add_argument("--eval_samples", type=int_flag(1, also=-1), default=None,
                       help="rows per full evaluation split (-1 = all)")
    group.add_argument("--eval_workers", type=int_flag(1), default=None, help="rows evaluated in parallel")
    group.add_argument("--parent_selection", choices=strategy_names("parent_selection"), default=None,
                       help="how the next parent is chosen (score_child_prop)")
    group.add_argument("--seed", type=int, default=None, help="seed of parent selection, to replay a run")
    group.add_argument("--parallel", type=int_flag(1), default=None,
                       help="generations in flight at once (1); the budget and the gateway are shared")
    group.add_argument("--skip_staged_eval", action="store_true", default=None, help="no 10-row stage first")
    group.add_argument("--final_test", action="store_true", default=None,
                       help="at the end, evaluate the test split once, for the node chosen on val and the initial node "
                            "(final_test.json; the loop never reads it); with --resume_from, also for a finished run")


def _mode_flags(ap: argparse.ArgumentParser) -> None:
    """What the command does besides running the loop."""
    group = ap.add_argument_group("other modes")
    group.add_argument("--evaluate", metavar="NODE[,NODE...]", default=None,
                       help="with --resume_from and --split: evaluate that split in full for these nodes of a finished "
                            "run, no generation (evaluations.json; rows already answered are not paid again)")
    group.add_argument("--split", default=None, help="the split --evaluate evaluates (e.g. test)")
    group.add_argument("--eval_test", action="store_true", help=argparse.SUPPRESS)
    group.add_argument("--dry_run", action="store_true",
                       help="print the plan and the cost estimate, then stop: no folder is made and no model called")
    group.add_argument("--edit_select_parent", action="store_true", default=None,
                       help="the workspace's select_next_parent.py chooses parents")
    group.add_argument("--run_baseline", choices=BASELINES, default=None, help="a baseline of the paper")


def _start_flags(ap: argparse.ArgumentParser) -> None:
    """Models, budget, data and where the run starts from."""
    group = ap.add_argument_group("models, budget and start")
    group.add_argument("--budget_usd", type=number_flag(0), default=None, help="stop the run once this much is spent")
    group.add_argument("--meta_model", default=None, help="the meta agent's model (litellm string)")
    group.add_argument("--meta_agent", choices=meta_agent_names(), default=None,
                       help="what edits the code each generation: builtin (default: the workspace's meta agent), "
                            "paper (the HyperAgents reference's), or a coding agent run in the sandbox through the "
                            "gateway: claude-code, codex, mini-swe-agent (python -m services.install "
                            "--coding-agents installs them)")
    group.add_argument("--task_model", default=None, help="the task agent's model (litellm string)")
    group.add_argument("--data", action="append", default=None, metavar="DOMAIN=PATH",
                       help="the data file of a domain that is not bundled, e.g. amo_bench=AMO-Bench.jsonl")
    group.add_argument("--initial_agent", default=None, metavar="NAME|PATH",
                       help=f"the agent the run starts from: {', '.join(sorted(INITIAL_AGENTS))} (task agents; "
                            "default: default), paper (the HyperAgents reference's generic task and meta agents), "
                            "or the path of an agent folder with task_agent:TaskAgent and meta_agent:MetaAgent")
    group.add_argument("--initial_from", default=None, metavar="RUN[:NODE]",
                       help="start from another run's node (default: its best), on any domain; see --transfer")
    group.add_argument("--transfer", choices=TRANSFERS, default=None,
                       help="with --initial_from: meta keeps the node's meta agent and agent/ and takes the task agent "
                            "from --initial_agent (the paper's transfer experiment); all keeps the whole node (meta)")
    group.add_argument("--replicates", type=int_flag(1), default=None, metavar="K",
                       help="K runs of this configuration, seeds --seed (0) to --seed+K-1, into one folder of runs "
                            "(--resume_from it continues them all; python -m apps.analyze reads it)")
    group.add_argument("--replicates_at_once", type=int_flag(1), default=None, metavar="N",
                       help="with --replicates: runs at once (default 1; all K with --executor ray)")


def add_where_flags(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of where agent code runs and what the run reports to (archive/run_folder.py GUARDED: a resume
    takes them from its command line alone)."""
    ap.add_argument("--track", action="extend", type=lambda text: [t for t in text.split(",") if t], default=None,
                    metavar="TRACKER[,TRACKER...]", help="also log the run to mlflow, wandb or tensorboard "
                    "(repeatable; each a pip extra: pip install -e \".[mlflow]\"); see docs/dashboard.md")
    ap.add_argument("--sandbox", choices=SANDBOX_BACKENDS, default=None, help="where agent code runs (auto)")
    ap.add_argument("--executor", choices=EXECUTORS, default=None,
                    help="local (default), or ray: every sandbox on a node of a Ray cluster, in that node's backend")
    ap.add_argument("--ray_address", default=None, metavar="ADDR",
                    help="with --executor ray: auto (this machine's cluster), HOST:PORT, or ray://HOST:PORT "
                         "(Ray Client, from outside the cluster; default: a private instance)")
    return ap


def apply_flags(config: Config, args: argparse.Namespace) -> Config:
    """The flags that set one config field each, over `config`."""
    return apply_overrides(config, {option: getattr(args, option) for option in FLAG_FIELDS}, args.data or ())


def check_flags(args: argparse.Namespace) -> bool:
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
    if args.resume_from and (args.run_id or args.output_dir) and os.path.realpath(
            Path(args.output_dir or "./outputs") / (args.run_id or Path(args.resume_from).name)) != os.path.realpath(
            args.resume_from):
        raise UserError("--output_dir and --run_id name a new run's folder; --resume_from continues a run in its own "
                        f"folder ({args.resume_from}): drop them")
    group = bool(args.resume_from) and (Path(args.resume_from) / "group.json").exists()
    if args.replicates_at_once is not None and not (args.replicates or group):
        raise UserError("--replicates_at_once goes with --replicates K, or --resume_from a folder of replicates")
    if args.dry_run and group:
        raise UserError(f"--dry_run plans a run before it starts; {args.resume_from} is a group that has started "
                        "(pass --dry_run --resume_from one of its seed-<s> runs)")
    return group


def run_replicates(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--replicates K, or --resume_from a folder of replicates: each replicate a run of its own."""
    from archive.experiments import read_group
    from optimizer.replicates import replicate_argv, run_group, start_group

    if args.resume_from:
        group_dir = Path(args.resume_from).resolve()
        group = read_group(group_dir)
        if group is None:
            raise UserError(f"--resume_from {args.resume_from}: no group.json there (not a folder of replicates)")
        check_group_argv(parser, args, group_dir, group["argv"])
        resuming = replicate_argv(parser, args)  # a started replicate is resumed with what this command accepts
    else:
        if not (args.domain or args.domain_spec or command_config(request_of(args)).loop.domains):
            raise UserError("pass --domain (e.g. --domain imo_grading) or --domain_spec FILE, "
                            "or --resume_from GROUP_DIR")
        output_dir = args.output_dir or "./outputs"
        group_dir = (Path(output_dir) / (args.run_id or datetime.now().strftime("%Y%m%d_%H%M%S"))).resolve()
        check_writable(group_dir, f"--output_dir {output_dir}")
        group = start_group(group_dir, replicate_argv(parser, args), args.replicates, args.seed or 0)
        resuming = []
    hold_folder(group_dir, "group")  # its runs are held each by its own process
    argv = group["argv"]
    at_once = args.replicates_at_once or replicates_at_once(parser, argv, len(group["runs"]))
    print(f"group    {group_dir}: {len(group['runs'])} replicates, seeds {', '.join(map(str, group['seeds']))}, "
          f"{at_once} at once" + ("; watch them with python -m apps.dashboard " + str(group_dir)
                                  if args.dashboard is not None else ""), flush=True)
    try:
        failed = run_group(group_dir, group, at_once, resuming)
    except (KeyboardInterrupt, Terminated) as e:
        again = ["--replicates_at_once", str(args.replicates_at_once)] if args.replicates_at_once else []
        try:
            again += group_accepting_flags(parser, argv)
        except (UserError, SystemExit):  # its config is gone since: the resume will say what it needs
            pass
        advise(e, "progress so far is saved; to continue: "
               + shlex.join([python_command(), "-m", "run_optimization", "--resume_from", str(group_dir), *again]))
        raise
    print(f"analyze: python -m apps.analyze {group_dir}", flush=True)
    stopped = {code: cause for code, cause in ((EXIT_MACHINE_DOWN, "a failure of this machine"),
                                               (EXIT_PROVIDER_DOWN, "a provider's outage")) if code in failed.values()}
    if stopped:  # the replicate's own line said what; the group's exit code says it too, the machine's first
        code = next(iter(stopped))
        print(f"error: {len(failed)} of {len(group['runs'])} replicates did not finish, stopped by {stopped[code]} "
              f"(see above); mend it, then continue with python -m run_optimization --resume_from {group_dir}",
              file=sys.stderr, flush=True)
        raise SystemExit(code)
    if failed:
        raise UserError(f"{len(failed)} of {len(group['runs'])} replicates did not finish (see above)")


def replicates_at_once(parser: argparse.ArgumentParser, argv: list[str], runs: int) -> int:
    """How many of a group's `runs` replicates run at once by default: all on a Ray cluster (the config its
    command line `argv` makes names executor ray, by a flag, --set or a file), else one."""
    return runs if command_config(request_of(parser.parse_args([str(a) for a in argv]))).sandbox.executor == "ray" \
        else 1


def names_a_folder(initial_agent: str) -> bool:
    """Whether --initial_agent names a folder of this host rather than a bundled agent."""
    return "/" in initial_agent or initial_agent.startswith((".", "~"))


def group_accepting_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The flags a resume of a group started with `argv` must give again (check_group_argv): the files it
    read (--config, --preset, --domain_spec, an --initial_agent folder), the run it started from, and
    where its code ran and data went (archive/run_folder.py)."""
    from archive.run_folder import accepting_flags

    theirs = parser.parse_args([str(a) for a in argv])
    flags = [part for flag in ("config", "preset", "initial_from", "transfer") if getattr(theirs, flag) is not None
             for part in (f"--{flag}", str(getattr(theirs, flag)))]
    flags += [part for spec in theirs.domain_spec or () for part in ("--domain_spec", spec)]
    config = command_config(request_of(theirs))
    if names_a_folder(config.loop.initial_agent):
        flags += ["--initial_agent", config.loop.initial_agent]
    return flags + accepting_flags(config)


def check_group_argv(parser: argparse.ArgumentParser, args: argparse.Namespace, group_dir: Path,
                     argv: list[str]) -> None:
    """The replicates a group has not started yet run with the command line its group.json keeps: someone's
    data, so it may ask for nothing of where code runs or data goes that this command does not give
    (archive/run_folder.py), else a UserError naming the flags that accept it. Nor may it name a spec file
    this command does not (a spec's scorer is code the host runs: domains/spec_scoring.py)."""
    from archive.experiments import GROUP
    from archive.run_folder import resumed_config
    from domains.registry import config_domains
    from optimizer.replicates import GROUP_FLAGS

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage would name someone's text raw
            theirs = parser.parse_args([str(a) for a in argv])
    except SystemExit:
        raise UserError(f"{group_dir / GROUP}: its command line is not one run_optimization takes") from None
    given = [f for f in (*GROUP_FLAGS, "evaluate", "split", "dry_run")
             if getattr(theirs, f, None) not in (None, False, parser.get_default(f))]
    if given:  # --replicates writes none of them: a replicate would resume, evaluate or serve what they name
        raise UserError(f"{group_dir / GROUP}: its command line has --{given[0]}, which no group's replicates take")
    for flag in ("config", "preset"):  # files read on this host, and they may set what the checks below compare
        if getattr(theirs, flag) is not None and getattr(theirs, flag) != getattr(args, flag):
            raise UserError(f"{group_dir / GROUP} asks for --{flag} {shlex.quote(getattr(theirs, flag))}; pass the "
                            f"same --{flag} to accept it")
    if theirs.initial_from is not None and (theirs.initial_from, theirs.transfer) != (args.initial_from, args.transfer):
        raise UserError(f"{group_dir / GROUP} asks for --initial_from {shlex.quote(theirs.initial_from)} (another "
                        f"run's code); pass the same --initial_from and --transfer to accept it")
    wanted, given_config = command_config(request_of(theirs)), command_config(request_of(args))
    resumed_config(wanted, given_config, group_dir / GROUP)
    agent = wanted.loop.initial_agent
    if names_a_folder(agent) and agent != given_config.loop.initial_agent:
        raise UserError(f"{group_dir / GROUP} asks for --initial_agent {shlex.quote(agent)} (a folder of this host, "
                        f"copied into every replicate); pass --initial_agent {shlex.quote(agent)} to accept it")
    mine = {os.path.realpath(p) for p in [*(args.domain_spec or ()), *config_domains(given_config.loop.domains,
                                                                                   False)[1]]}
    for spec in [*(theirs.domain_spec or ()), *config_domains(wanted.loop.domains, False)[1]]:
        if os.path.realpath(spec) not in mine:
            raise UserError(f"{group_dir / GROUP} asks for --domain_spec {shlex.quote(spec)} (a scorer of that "
                            f"spec's folder, run on this host); pass --domain_spec {shlex.quote(spec)} to accept it")


def request_of(args: argparse.Namespace) -> RunRequest:
    """The run the flags ask for."""
    return RunRequest(
        domains=tuple(args.domain or ()), domain_specs=tuple(args.domain_spec or ()), config=args.config,
        preset=args.preset, settings=tuple(args.settings or ()),
        overrides={option: getattr(args, option) for option in FLAG_FIELDS}, data=tuple(args.data or ()),
        output_dir=args.output_dir or "./outputs", run_id=args.run_id, resume_from=args.resume_from, name=args.name,
        tags=None if args.tags is None else tuple(args.tags), initial_from=args.initial_from,
        transfer=args.transfer, evaluate=None if args.evaluate is None else tuple(args.evaluate), split=args.split,
        dry_run=args.dry_run, replicates=args.replicates, dashboard=args.dashboard)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    group = check_flags(args)
    if not args.dry_run and (args.replicates or group):
        return run_replicates(parser, args)
    launch(request_of(args), draw=pictures.draw)


if __name__ == "__main__":
    exit_on_user_error(main)
