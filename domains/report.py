"""Score a harness run: `report.json` in the run folder, and a short table on stdout.

    python -m domains.report --domain imo_grading --dname ./outputs/RUN
    python -m domains.report --domain imo_proof --dname ./outputs/RUN   # grades the proofs first
    python -m domains.report --domain_spec my_task.yaml --dname ./outputs/RUN

Each domain's scorer makes the report (domains/scoring.py). What a scorer asks for comes
from here: LLM judges through a gateway whose ledger is in `RUN/judgements/`, and the
grader agent (the `proofgrader` package for imo_proof), run over the predictions into
`RUN/gradings/` with a gateway of its own there.
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import cast

from domains import scoring
from domains.base import Domain
from domains.harness import GRADINGS, JOURNAL, PREDICTIONS, grade_run, run_folder
from domains.judge import GatewayJudge
from domains.registry import get_domain, use_domain_specs
from services.cli_parser import ArgumentParser
from services.config import Config, load_config
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_json, read_bounded
from services.local_model import is_local
from services.sandbox import Sandboxes, choose_backend
from services.startup import open_services
from services.user_files import parse_json

MAX_RUN_RECORD = 2**20  # an evaluation folder's run.json is a few hundred bytes


class ReportTools:
    """What a scorer asks a standalone report for (domains.scoring.ScoringTools), each with a
    gateway of its own in the run folder; `close` stops them."""

    def __init__(self, dname: Path, config: Config, model: str | None = None) -> None:
        self.dname = dname
        self.config = config
        self.model = model  # the grader's model (--model), else the grading domain's role
        self.grader: dict | None = None  # who graded (grader_of), once `grade` ran
        self._open = contextlib.ExitStack()

    def judge(self) -> GatewayJudge:
        judge = GatewayJudge(self.config, folder=self.dname / "judgements")
        self._open.callback(judge.close)
        return judge

    def grade(self, grading: scoring.Domain, grader_agent: str, predictions: Path) -> Path:
        folder = predictions.parent / GRADINGS
        requested = self.model or grading.model_role
        services = open_services(self.config, folder, [requested])
        if line := services.why_line(requested, "--model"):
            print(line, flush=True)
        self.grader = grader_of(grader_agent, self.config.resolve_model(requested))  # `auto` filled by now
        backend = choose_backend(self.config.sandbox)
        with run_folder(folder), services:
            # A scorer's grading domain is one of the registry's (domains.base.Domain).
            assert services.gateway, "open services have a gateway"
            result = grade_run(cast(Domain, grading), grader_agent, predictions, self.config, services.gateway,
                               sandboxes=Sandboxes(self.config.sandbox, backend, services.gateway.unix_socket),
                               model=requested)
        print(result.line())
        if result.stopped_by:
            raise UserError(result.stop_message())
        return result.folder / PREDICTIONS

    def close(self) -> None:
        self._open.close()


def grader_of(agent: str, model: str) -> dict:
    """What report.json says of the grader: its agent, its model and, when that is the bundled local model
    (services/local_model.py), that its grades mean little (it is often the model that wrote the proofs)."""
    warning = (f"graded by {model}, the bundled local model: its grades are near chance (it may well be the "
               "model that wrote these proofs), so this score means little; grade with a provider's model "
               "(--model PROVIDER/MODEL, or models.grader in --config)") if is_local(model) else None
    return {"agent": agent, "model": model, "warning": warning}


def grader_lines(result: dict) -> list[str]:
    """The report's lines naming who graded, and its warning; none for a report no grader made."""
    grader = result.get("grader")
    if not isinstance(grader, dict):
        return []
    return [f"grader          {grader['agent']}, model {grader['model']}",
            *([f"warning: {grader['warning']}"] if grader.get("warning") else [])]


def evaluations_of(run_dir: Path, domain: str) -> list[Path]:
    """The evaluation folders of a loop run (`RUN/evals/<key>/`, each a harness run) of `domain`, newest first."""
    found = []
    for folder in (run_dir / "evals").iterdir():
        try:
            record = parse_json(read_bounded(folder / "run.json", MAX_RUN_RECORD))
        except (OSError, ValueError):
            continue  # not a finished evaluation: nothing to score
        if isinstance(record, dict) and record.get("domain") == domain and (folder / PREDICTIONS).is_file():
            found.append(folder)
    return sorted(found, key=lambda folder: (folder / PREDICTIONS).stat().st_mtime, reverse=True)


def no_predictions(dname: Path, domain: str, named: str) -> str:
    """Why `dname` has nothing to score, with a command that works: one that makes, completes or names a
    folder that has. `named` is the flags that name the domain (a spec domain is known by its file only)."""
    where = shlex.quote(str(dname))
    if (dname / "group.json").is_file():  # replicates of the loop (run_optimization --replicates)
        return f"{dname} is a group of runs of the loop: `python -m apps.analyze {where}` reads their scores"
    if (dname / "evals").is_dir():  # a run of the loop: its evaluations are harness runs, scored already
        analyze = f"`python -m apps.analyze {where}` reads its scores"
        found = evaluations_of(dname, domain)
        if not found:
            return f"{dname} is a run of the loop with no evaluation of {domain}: {analyze}"
        return (f"{dname} is a run of the loop, not of the harness: {analyze}; each of its {len(found)} "
                f"evaluation(s) of {domain} is a harness run to score, the latest: "
                f"`python -m domains.report {named} --dname {shlex.quote(str(found[0]))}`")
    if (dname / JOURNAL).is_file():  # a harness run stopped before it wrote its predictions
        return (f"{dname} has no predictions.csv yet: finish it with `python -m domains.harness {named} "
                f"--resume_from {where}`")
    return (f"{dname} has no predictions.csv: make it with `python -m domains.harness {named} --output_dir "
            f"{shlex.quote(str(dname.parent))} --run_id {shlex.quote(dname.name)}`")


def report(dname: str | Path, domain: str, config: Config | None = None, model: str | None = None,
           named: str | None = None) -> dict:
    """Score the harness run in `dname`; `named`: how the user named the domain (`--domain_spec FILE`), for hints."""
    dname = Path(dname)
    dom = get_domain(domain)
    if not (dname / PREDICTIONS).is_file():
        raise UserError(no_predictions(dname, dom.name, named or f"--domain {shlex.quote(dom.name)}"))
    dom.scorer.check_ready(dom)
    tools = ReportTools(dname, config or load_config(), model)
    try:
        result = {"domain": dom.name, **dom.scorer.score(dom, dname / PREDICTIONS, tools)}
        if tools.grader is not None:
            result["grader"] = tools.grader
    finally:
        tools.close()
    atomic_write_json(dname / "report.json", result)
    return result


def main(argv: list[str] | None = None) -> None:
    ap = ArgumentParser(prog="python -m domains.report", description="Score a harness run.")
    ap.add_argument("--domain", default=None)
    ap.add_argument("--domain_spec", default=None, metavar="FILE", help="instead of --domain: a domain's YAML spec")
    ap.add_argument("--dname", required=True, help="the harness output folder")
    ap.add_argument("--config", default=None, help="YAML config (models for grading proofs)")
    ap.add_argument("--model", default=None, help="grader model for imo_proof (default: the config's grader)")
    args = ap.parse_args(argv)
    if (args.domain is None) == (args.domain_spec is None):
        raise UserError("pass --domain NAME or --domain_spec FILE (one of them)")
    domain = args.domain or use_domain_specs([args.domain_spec])[0]
    named = f"--domain_spec {shlex.quote(args.domain_spec)}" if args.domain_spec else None
    result = report(args.dname, domain, load_config(args.config), args.model, named)
    print("\n".join([get_domain(domain).format_report(result), *grader_lines(result)]))
    print(f"report: {Path(args.dname) / 'report.json'}")


if __name__ == "__main__":
    exit_on_user_error(main)
