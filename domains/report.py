"""Score a harness run: `report.json` in the run folder, and a short table on stdout.

    python -m domains.report --domain imo_grading --dname ./outputs/RUN
    python -m domains.report --domain imo_proof --dname ./outputs/RUN   # grades the proofs first

Domains with labels are scored directly. Domains whose predictions need grading
(imo_proof) are graded by an installed grader agent (the `proofgrader` package),
running the grading domain's harness into `RUN/gradings/`, then scored from there.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from domains.base import Domain
from domains.judge import GatewayJudge
from domains.registry import get_domain
from services.config import Config, load_config
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_json


def score_predictions(domain: Domain, predictions_csv: Path, judge=None) -> dict:
    """The domain's metrics for one predictions.csv (nothing is written; `judge` is the LLM
    judge of domains that use one, see domains/judge.py)."""
    from domains.imo.data import load_csv

    df = load_csv(predictions_csv, [domain.question_id, "prediction"])
    try:
        return domain.metrics(df, judge=judge) if domain.uses_judge else domain.metrics(df)
    except ValueError as e:
        raise UserError(f"cannot score {predictions_csv}: {e}") from None


def require_grader(domain: Domain) -> None:
    """UserError with the install commands when the package that grades `domain` is missing."""
    package = domain.grader_agent.split(".")[0]
    if importlib.util.find_spec(package) is None:
        raise UserError(
            f"{domain.name} is graded by the {package} package, which is not installed: "
            "build it with `setup_proofgrader_repo --proofautograder`, then `pip install -e ./proofgrader_repo`"
        )


def grade(domain: Domain, dname: Path, config: Config, model: str | None = None) -> Path:
    """Run the grader over a run's predictions; returns the grading run's folder."""
    from domains.harness import harness

    require_grader(domain)
    folder = dname / "gradings"
    resume = str(folder) if (folder / "predictions.jsonl").exists() else None
    return harness(domain=domain.graded_by, agent_path=domain.grader_agent, output_dir=str(dname), run_id="gradings",
                   resume_from=resume, proofs_dname=str(dname), model=model, config=config)


def report(dname: str | Path, domain: str, config: Config | None = None, model: str | None = None) -> dict:
    dname = Path(dname)
    dom = get_domain(domain)
    if not (dname / "predictions.csv").is_file():
        raise UserError(f"{dname} has no predictions.csv: run `python -m domains.harness --domain {domain}` first")
    if dom.graded_by:
        graded = grade(dom, dname, config or load_config(), model)
        result = score_predictions(get_domain(dom.graded_by), graded / "predictions.csv")
    else:
        if dom.metrics is None:
            raise UserError(f"domain {domain} has no metrics to report")
        judge = GatewayJudge(config or load_config(), folder=dname / "judgements") if dom.uses_judge else None
        try:
            result = score_predictions(dom, dname / "predictions.csv", judge)
        finally:
            if judge:
                judge.close()
    result = {"domain": dom.name, **result}
    atomic_write_json(dname / "report.json", result)
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m domains.report", description="Score a harness run.")
    ap.add_argument("--domain", required=True)
    ap.add_argument("--dname", required=True, help="the harness output folder")
    ap.add_argument("--config", default=None, help="YAML config (models for grading proofs)")
    ap.add_argument("--model", default=None, help="grader model for imo_proof (default: the config's grader)")
    args = ap.parse_args(argv)
    result = report(args.dname, args.domain, load_config(args.config), args.model)
    print(get_domain(args.domain).format_report(result))
    print(f"report: {Path(args.dname) / 'report.json'}")


if __name__ == "__main__":
    exit_on_user_error(main)
