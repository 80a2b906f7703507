"""How a domain's predictions become its report: by rule against labels, with LLM judges, or
graded by a grader agent and scored from its grades.

A scorer reads a run's predictions.csv and returns the report (plain data, `json.dump`-able).
What it needs beyond the file comes from the caller, through `ScoringTools`: the loop passes
its run's gateway and node, `python -m domains.report` its own services. A scorer never runs
agent code itself: a graded domain asks the caller to run the grader (an installed package,
in a sandbox) over the predictions, then scores the grades with the grading domain's scorer.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from domains.data import load_csv
from services.errors import UserError
from services.fsutil import csv_values

if TYPE_CHECKING:
    import pandas as pd

    from services.config import Config

Judge = Callable[[str], str]  # prompt -> the judge's reply
# report.json: the metrics of one evaluation (domains/metrics.py, answer_metrics.py); 2 adds row_scores
REPORT_SCHEMA = 2


class Domain(Protocol):
    """What a scorer reads of a domain (domains.base.Domain has it); read-only, as a frozen domain is."""

    @property
    def name(self) -> str: ...
    @property
    def question_id(self) -> str: ...
    @property
    def model_role(self) -> str: ...
    @property
    def scorer(self) -> Scorer: ...


class Scorer(Protocol):
    @property
    def lines(self) -> Callable[[dict], str]:
        """A report as a few fixed-width lines for a person."""
        ...

    def score(self, domain: Domain, predictions: Path, tools: ScoringTools | None = None) -> dict:
        """The report for the predictions.csv at `predictions`."""
        ...

    def models(self, config: Config) -> set[str]:
        """The models scoring calls (judges, the grader), as the run's config names them."""
        ...

    def check_ready(self, domain: Domain) -> None:
        """UserError when scoring cannot work here (a grader package missing)."""
        ...

    def plan_line(self, domain: Domain, config: Config) -> str | None:
        """A line for the run's plan about how it is scored, or None."""
        ...


class ScoringTools(Protocol):
    """What the caller of a scorer provides; tools that also carry the caller's `config` (a Config) have
    its harness.label_case applied to graders' labels (`label_case`)."""

    def judge(self) -> Judge:
        """An LLM judge whose calls are booked to role `judge`."""
        ...

    def grade(self, grading: Domain, grader_agent: str, predictions: Path) -> Path:
        """Run `grader_agent` (the agent of domain `grading`) over the predictions.csv at `predictions`;
        returns the graded predictions.csv."""
        ...


def read_predictions(domain: Domain, predictions: Path) -> pd.DataFrame:
    """The predictions as the harness was given them (predictions.csv marks formula-like cells)."""
    return csv_values(load_csv(predictions, [domain.question_id, "prediction"]))


def label_case(tools: ScoringTools | None) -> str:
    """harness.label_case of the caller's config, which its tools carry as `config` (the standalone
    report's do); `lenient`, the default, without one."""
    config = getattr(tools, "config", None)
    return getattr(getattr(config, "harness", None), "label_case", "lenient")


def scored(predictions: Path, metrics: Callable[..., dict], df: pd.DataFrame, **kwargs: object) -> dict:
    """The metrics' report, as a record: report.json carries its schema version."""
    try:
        return {"schema_version": REPORT_SCHEMA, **metrics(df, **kwargs)}
    except ValueError as e:
        raise UserError(f"cannot score {predictions}: {e}") from None


@dataclass(frozen=True)
class ByRule:
    """Metrics computed from the predictions and the labels of the data set alone."""

    metrics: Callable  # DataFrame with a prediction column -> report
    lines: Callable[[dict], str]  # the report as a few lines for a person
    reads_labels: bool = False  # `metrics` takes label_case=, the caller's harness.label_case

    def score(self, domain: Domain, predictions: Path, tools: ScoringTools | None = None) -> dict:
        case = {"label_case": label_case(tools)} if self.reads_labels else {}
        return scored(predictions, self.metrics, read_predictions(domain, predictions), **case)

    def models(self, config: Config) -> set[str]:
        return set()

    def check_ready(self, domain: Domain) -> None:
        pass

    def plan_line(self, domain: Domain, config: Config) -> str | None:
        return None


@dataclass(frozen=True)
class Judged(ByRule):
    """Metrics for which some answers are checked by LLM judges (role judge): `metrics` takes judge=."""

    def score(self, domain: Domain, predictions: Path, tools: ScoringTools | None = None) -> dict:
        if tools is None:
            raise UserError(f"domain {domain.name} is scored with LLM judges: it needs a gateway to call them")
        return scored(predictions, self.metrics, read_predictions(domain, predictions), judge=tools.judge())

    def models(self, config: Config) -> set[str]:
        return {config.resolve_model("judge")}


@dataclass(frozen=True)
class Graded:
    """Predictions graded by an installed grader agent, then scored as the grading domain scores."""

    grading: Domain  # whose agent grades, and whose scorer scores the grades (imo_proof_grading)
    grader_agent: str  # the importable agent that grades, outside every workspace (proofgrader.task_agent)

    @property
    def lines(self) -> Callable[[dict], str]:
        return self.grading.scorer.lines

    def score(self, domain: Domain, predictions: Path, tools: ScoringTools | None = None) -> dict:
        if tools is None:
            raise UserError(f"domain {domain.name} is scored by grading it: it needs the grader to run")
        graded = tools.grade(self.grading, self.grader_agent, predictions)
        return self.grading.scorer.score(self.grading, graded, tools)

    def models(self, config: Config) -> set[str]:
        return {config.resolve_model(self.grading.model_role)} | self.grading.scorer.models(config)

    def check_ready(self, domain: Domain) -> None:
        """UserError with the install commands when the grader's package is missing."""
        package = self.grader_agent.split(".")[0]
        if importlib.util.find_spec(package) is None:
            raise UserError(
                f"{domain.name} is graded by the {package} package, which is not installed: "
                "build it with `setup_proofgrader_repo --proofautograder`, then `pip install -e ./proofgrader_repo`")

    def plan_line(self, domain: Domain, config: Config) -> str:
        found = importlib.util.find_spec(self.grader_agent.split(".")[0])
        where = found.origin if found else "not installed"
        heldout = config.models.heldout_grader
        return (f"grader   {domain.name}: {self.grader_agent} ({where}), "
                f"model {config.resolve_model(self.grading.model_role)}"
                + (f"; the best nodes' proofs graded again by held-out model {heldout}" if heldout else ""))
