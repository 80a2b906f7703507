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
from pathlib import Path
from typing import cast

from domains import scoring
from domains.base import Domain
from domains.harness import GRADINGS, PREDICTIONS, grade_run, run_folder
from domains.judge import GatewayJudge
from domains.registry import get_domain, use_domain_specs
from services.cli_parser import ArgumentParser
from services.config import Config, load_config
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_json
from services.local_model import is_local
from services.sandbox import choose_backend
from services.startup import open_services


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
                               backend=backend, model=requested)
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


def report(dname: str | Path, domain: str, config: Config | None = None, model: str | None = None) -> dict:
    dname = Path(dname)
    dom = get_domain(domain)
    if not (dname / PREDICTIONS).is_file():
        raise UserError(f"{dname} has no predictions.csv: run `python -m domains.harness --domain {domain}` first")
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
    result = report(args.dname, domain, load_config(args.config), args.model)
    print("\n".join([get_domain(domain).format_report(result), *grader_lines(result)]))
    print(f"report: {Path(args.dname) / 'report.json'}")


if __name__ == "__main__":
    exit_on_user_error(main)
