"""`python -m domains.harness`: evaluate a task agent on a domain's data, with a gateway of its own.

Every finished row is appended to `predictions.jsonl` at once, so a killed run loses only
the rows in flight; `predictions.csv` (the seed's output format) is rewritten atomically
every `save_interval` rows and at the end. `--resume_from DIR` skips the rows that are
done and pays nothing for them. The gateway's ledger lives in the output folder.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import threading
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from domains.base import use_data_files
from domains.harness.journal import JOURNAL, PREDICTIONS
from domains.harness.request import EvalRequest
from domains.harness.rows import load_rows
from domains.harness.split import run_folder, run_split
from domains.harness.worker_client import open_agent_worker
from domains.registry import get_domain, use_domain_specs
from services.cli_parser import ArgumentParser
from services.config import SANDBOX_BACKENDS, Config, load_config, validate
from services.errors import MachineDown, UserError, end_process, exit_on_user_error
from services.flags import apply_settings, int_flag, number_flag, parse_data_flags
from services.fsutil import read_below
from services.provider import LITELLM
from services.render import console
from services.sandbox import Sandboxes, SandboxLost, choose_backend
from services.startup import open_services
from services.user_files import parse_json

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from domains.base import Domain
    from services.gateway import Gateway


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m domains.harness", description="Evaluate a task agent on a domain.")
    ap.add_argument("--domain", default=None,
                    help="imo_grading, imo_proof, imo_proof_grading, imo_answer, aime2025 or amo_bench")
    ap.add_argument("--domain_spec", default=None, metavar="FILE",
                    help="instead of --domain: a domain of your own, written as a YAML spec (docs/domains.md)")
    ap.add_argument("--data", action="append", default=None, metavar="DOMAIN=PATH",
                    help="the data file of a domain that is not bundled, e.g. amo_bench=AMO-Bench.jsonl")
    ap.add_argument("--agent_path", default="task_agent", help="a .py file or a module path with a TaskAgent")
    ap.add_argument("--output_dir", default="./outputs", help="parent folder of run folders")
    ap.add_argument("--run_id", default=None, help="run folder name (default: a timestamp)")
    ap.add_argument("--num_samples", type=int_flag(1, also=-1), default=None,
                    help="first N rows only; -1 = all (the default; a resume's: its run's)")
    ap.add_argument("--save_interval", type=int_flag(1), default=None, help="rewrite predictions.csv every N rows")
    ap.add_argument("--num_workers", type=int_flag(1), default=None, help="rows evaluated in parallel")
    ap.add_argument("--resume_from", default=None,
                    help="an earlier output folder to complete (its domain, subset and rows from its run.json "
                         "unless --domain or --domain_spec is given)")
    ap.add_argument("--subset", default=None,
                    help="split (train/val/test) or the seed's suffix, e.g. _filtered_100_train (default: the "
                         "domain's; a resume's: its run's)")
    ap.add_argument("--proofs_dname", default=None, help="imo_proof_grading: a run folder whose proofs to grade")
    ap.add_argument("--model", default=None, help="litellm model string or a role alias from the config")
    ap.add_argument("--config", default=None, help="YAML config overriding configs/default.yaml")
    ap.add_argument("--set", action="append", default=None, metavar="SECTION.KEY=VALUE", dest="settings",
                    help="one config field, after --config and before the flags below, e.g. --set "
                         "harness.row_timeout_s=600 (VALUE is YAML; repeatable)")
    ap.add_argument("--budget_usd", type=number_flag(0), default=None,
                    help="stop new LLM calls after this many dollars")
    ap.add_argument("--budget_tokens", type=int_flag(0), default=None, help="stop new LLM calls after this many tokens")
    ap.add_argument("--sandbox", choices=SANDBOX_BACKENDS, default=None,
                    help="where agent code runs (default: the config's sandbox.backend, auto)")
    return ap


MAX_RUN_RECORD = 2**16  # bytes of an evaluation folder's run.json (a few hundred)
FLAGS = {"budget_usd": ("gateway", "budget_usd"), "budget_tokens": ("gateway", "budget_tokens"),
         "save_interval": ("harness", "save_interval"), "num_workers": ("harness", "num_workers"),
         "sandbox": ("sandbox", "backend")}


def output_folder(args: EvalRequest) -> Path:
    """The run folder: the one to resume, or a new one under --output_dir that holds no run yet."""
    if args.resume_from:
        folder = Path(args.resume_from).resolve()
        if not (folder / JOURNAL).exists() and not (folder / PREDICTIONS).exists():
            raise UserError(f"--resume_from {args.resume_from}: no predictions.jsonl there to resume from")
        return folder
    folder = (Path(args.output_dir) / (args.run_id or datetime.now().strftime("%Y%m%d_%H%M%S_%f"))).resolve()
    if (folder / JOURNAL).exists():
        raise UserError(f"{folder} already holds a run: pass --resume_from {folder} to continue it, "
                        "or another --run_id")
    return folder


@contextlib.contextmanager
def removed_on_error(folder: Path) -> Iterator[None]:
    """The folders above `folder` that the run makes are removed again, when empty, if a UserError
    ends it (`run_folder` removes `folder` itself): a run that could not start leaves nothing."""
    made = [p for p in folder.parents if not p.exists()]  # nearest first
    try:
        yield
    except UserError:
        for path in made:
            with contextlib.suppress(OSError):  # not empty: someone else's now
                path.rmdir()
        raise


@contextlib.contextmanager
def lost_node_is_one_line() -> Iterator[None]:
    """A Ray node lost under the run's sandbox ends the run with one line; what finished stays."""
    try:
        yield
    except SandboxLost as e:
        raise UserError(f"{e}; the same command goes on from the rows that finished") from None


@contextlib.contextmanager
def machine_down_resumes(folder: Path) -> Iterator[None]:
    """This machine's failure (a full disk, ...) ends the run with the folder to resume from in its line."""
    try:
        yield
    except MachineDown as e:
        e.folder = e.folder or folder
        raise


def import_litellm_meanwhile() -> None:
    """Start importing litellm, for the gateway and the key check, in a thread: it runs while this
    thread loads the data and opens the sandbox, which this thread's own import would follow.

    The garbage collector is off meanwhile: the import makes millions of objects and next to no
    garbage, and collecting during it cost a third of the command's CPU (measured side by side with
    bench/harness_throughput.py's command: 3.7 s against 2.7 s). What it made is then frozen, so the
    collections of the run do not go over it again. The host's gateway is the one process of a run
    that imports litellm; sandboxed code does not (agent/llm.py).
    """

    def run() -> None:
        gc.disable()
        try:
            LITELLM.load()
        except Exception:
            pass  # the key check imports it again, and says what failed
        finally:
            gc.freeze()
            gc.enable()

    threading.Thread(target=run, name="import-litellm", daemon=True).start()


def completed(args: EvalRequest) -> EvalRequest:
    """`args` with the subset and rows it left out: a resume that names no domain takes them, and the domain, from
    its folder's run.json (split.run_record); anything else, all rows of the domain's default subset."""
    if args.resume_from and args.domain is None and args.domain_spec is None:
        args = recorded(args)
    return replace(args, subset=args.subset or "", num_samples=-1 if args.num_samples is None else args.num_samples)


def recorded(args: EvalRequest) -> EvalRequest:
    """`args` filled in from run.json of the folder it resumes. A handed folder's record says only what its run was
    about: the agent, its model and the config stay the command's. Read as data: a regular file, no link
    followed, within MAX_RUN_RECORD bytes, each value used only with the type the harness writes."""
    folder, where = args.resume_from or ".", f"--resume_from {args.resume_from}"  # completed() asks with a folder
    try:
        data, cut = read_below(folder, "run.json", MAX_RUN_RECORD)
        record = None if cut else parse_json(data)
    except FileNotFoundError:
        raise UserError(f"{where}: no run.json there naming its domain (a run stopped before its end has none): "
                        "pass --domain NAME or --domain_spec FILE") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{where}: its run.json is unreadable ({str(e)[:200]}): pass --domain NAME or "
                        "--domain_spec FILE") from None
    if not isinstance(record, dict) or not isinstance(record.get("domain"), str) or not record["domain"].strip():
        raise UserError(f"{where}: its run.json names no domain: pass --domain NAME or --domain_spec FILE")
    subset, rows = args.subset, args.num_samples
    if subset is None and isinstance(record.get("subset"), str):
        subset = record["subset"]
    if rows is None and type(record.get("num_samples")) is int and (record["num_samples"] >= 1
                                                                      or record["num_samples"] == -1):
        rows = record["num_samples"]
    return replace(args, domain=record["domain"], subset=subset, num_samples=rows)


def domain_of(args: EvalRequest) -> Domain:
    """The domain --domain names, or the one --domain_spec defines."""
    if args.domain is not None and args.domain_spec is None:
        return get_domain(args.domain)
    if args.domain_spec is not None and args.domain is None:
        return get_domain(use_domain_specs([args.domain_spec])[0])
    raise UserError("pass --domain NAME or --domain_spec FILE (one of them)")


def evaluate(args: EvalRequest, config: Config) -> None:
    """One harness run as the flags ask, with a gateway and a sandbox of its own.

    The worker starts with the first row. A bad key or subset still ends the run before any row,
    and leaves no folder. (The command starts litellm's import in a thread before it calls this;
    a Python session calling it through the API imports litellm when the gateway needs it.)
    """
    use_data_files(config.harness.data_files)
    domain = domain_of(args)
    proofs = Path(args.proofs_dname) if args.proofs_dname else None
    folder = output_folder(args)
    requested = args.model or domain.model_role
    services = open_services(config, folder)  # `requested` is checked below, once the sandbox is open
    model = config.resolve_model(requested)
    backend = choose_backend(config.sandbox)
    asked = {"subset": args.subset, "proofs_dname": args.proofs_dname, "agent_path": args.agent_path,
             "num_samples": args.num_samples}
    with machine_down_resumes(folder), removed_on_error(folder), run_folder(folder), lost_node_is_one_line(), \
            services, open_agent_worker(
                config, args.agent_path, model, cast("Gateway", services.gateway), folder,  # the gateway: open here
                sandboxes=Sandboxes(config.sandbox, backend, cast("Gateway", services.gateway).unix_socket),
                node="eval", role=domain.model_role) as worker:
        rows = load_rows(domain, args.subset, proofs, -1 if args.num_samples is None else args.num_samples)
        services.require(requested)
        if line := services.why_line(requested, "--model"):
            print(console(line), flush=True)
        result = run_split(domain, rows, worker, folder, label=" ".join(x for x in (domain.name, args.subset) if x),
                           asked=asked)
    print(console(result.line()))
    if result.stopped_by:
        raise UserError(result.stop_message())


def config_of(args: EvalRequest) -> Config:
    """The config the flags ask for: --config, then --set, then the specific flags."""
    config = apply_settings(load_config(args.config), list(args.settings))
    config.harness.data_files.update(parse_data_flags(list(args.data)))
    for flag, (section, name) in FLAGS.items():
        if getattr(args, flag) is not None:
            setattr(getattr(config, section), name, getattr(args, flag))
    return validate(config)


def main(argv: list[str] | None = None) -> None:
    args = EvalRequest.from_args(build_parser().parse_args(argv))
    import_litellm_meanwhile()  # the longest part of the start, for the gateway and the key check
    evaluate(completed(args), config_of(args))


def exit_without_teardown(run: Callable[[], object]) -> None:
    """Run `run` (main under exit_on_user_error), then end the process with its exit code at once
    (services.errors.end_process: atexit handlers run, streams flushed, no interpreter teardown).

    By then every file, sandbox and server of the run is closed. What is skipped is the teardown of
    litellm's thousands of modules and objects, which the gateway's import put in this process: about
    0.25 s of a 3 s command on 2 busy cores (bench/harness_throughput.py's command, measured side by side).
    """
    try:
        run()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
            print(console(e.code), file=sys.stderr)
    end_process(code)


if __name__ == "__main__":
    exit_without_teardown(lambda: exit_on_user_error(main))
