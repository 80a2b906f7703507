"""What a domain is: one `Domain` object says everything the harness, the report and the
loop need to know about a task. No `if domain == ...` anywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from domains.scoring import Scorer
from services.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from services.config import Config, LoopConfig

# Data files the user gives for domains that are not bundled (`--data`), by domain name.
DATA_FILES: dict[str, str] = {}


def use_data_files(files: dict[str, str]) -> None:
    DATA_FILES.update(files)


@dataclass(frozen=True)
class Stage:
    """A screening stage of the evaluation: the first `rows` train rows, after which the evaluation
    goes on only if every domain of the run scores above `above` (its `score_key`) and passes the
    stage's promotion `rule` (search/promotion/; None: the run's `loop.promotion`)."""

    rows: int
    above: float = 0.0
    rule: str | None = None


@dataclass(frozen=True)
class Domain:
    name: str
    question_id: str  # column that names a row
    inputs: dict[str, str]  # key the agent sees -> dataset column
    label_column: str | None  # ground truth the metrics compare with (never sent to the agent)
    hidden_columns: tuple[str, ...]  # every column that must never reach agent code
    subsets: dict[str, str]  # --subset suffix (as in the seed) -> file name in data_dir
    splits: dict[str, str]  # split name -> subset suffix; the loop selects on val, else train
    score_key: str  # the report key the loop optimizes
    scorer: Scorer  # how predictions become the report (domains/scoring.py)
    data_dir: Path | None = None  # where subset files live; None: rows come from another run
    stages: tuple[Stage, ...] = (Stage(10),)  # screening stages before the full evaluation (loop.stages overrides)
    model_role: str = "task"  # gateway role and default model alias of this domain's agent
    default_subset: str = ""
    loader: Callable | None = None  # subset suffix -> DataFrame, for data that is not one CSV per subset
    score_note: str = ""  # why the score is what it is, when that is a choice (shown in the run's plan)
    answers_column: str | None = None  # a grading domain: the input column that holds the graded run's prediction
    try_match: str = "label"  # how the meta agent's try command compares: label (equal text) | math (math-verify)
    task: str = ""  # the domain the agent is told it works on, when this one is another's rows under another scorer

    def subset_suffix(self, subset: str | None) -> str:
        """Accept the seed's suffix (`_filtered_100_train`) or a split name (`train`)."""
        subset = self.default_subset if subset in (None, "") else subset
        suffix = self.splits.get(subset, subset)
        if suffix not in self.subsets:
            names = sorted({*self.subsets, *self.splits} - {""})
            raise UserError(f"unknown subset {subset!r} for domain {self.name} (known: {', '.join(names) or 'none'})")
        return suffix

    def dataset_path(self, subset: str | None = None) -> Path:
        """The CSV of a subset (`load` reads domains with a `loader` otherwise)."""
        if self.data_dir is None:
            raise UserError(f"domain {self.name} has no bundled data set")
        return self.data_dir / self.subsets[self.subset_suffix(subset)]

    def required_columns(self) -> list[str]:
        cols = [self.question_id, *self.inputs.values()]
        return cols + ([self.label_column] if self.label_column else [])

    def load(self, subset: str | None = None) -> pd.DataFrame:
        from domains.data import load_csv

        if self.answers_column is not None:
            raise UserError(f"domain {self.name} grades another run's proofs: pass --proofs_dname RUN_DIR")
        if self.loader is not None:
            return self.loader(self.subset_suffix(subset))
        return load_csv(self.dataset_path(subset), self.required_columns())

    def rows_from(self, rows: pd.DataFrame, predictions: pd.Series, source: Path) -> pd.DataFrame:
        """The rows that grade another run's predictions: that run's `rows` (its own result columns
        left out), each of its `predictions` as this domain's `answers_column`."""
        if self.answers_column is None:
            raise UserError(f"domain {self.name} has a data set of its own and grades no other run's predictions")
        rows = rows.copy()
        rows[self.answers_column] = predictions
        missing = [c for c in self.required_columns() if c not in rows.columns]
        if missing:
            raise UserError(f"{source} lacks column(s) {', '.join(missing)} needed by {self.name}")
        return rows

    # -- scoring (domains/scoring.py) ------------------------------------------------------
    def format_report(self, report: dict) -> str:
        """The report as a few fixed-width lines for a person."""
        return self.scorer.lines(report)

    def models_needed(self, config: Config) -> set[str]:
        """Every model an evaluation of this domain calls: its agent's, and its scorer's (grader, judges)."""
        return {config.resolve_model(self.model_role)} | self.scorer.models(config)

    def screening(self, loop: LoopConfig) -> tuple[Stage, ...]:
        """The stages this run screens a node with (`loop`: the config's loop section): the config's
        `loop.stages`, for every domain or for this one by name, else its own; none with
        `loop.skip_staged_eval`."""
        if loop.skip_staged_eval:
            return ()
        stages = loop.stages.get(self.name) if isinstance(loop.stages, dict) else loop.stages
        return self.stages if stages is None else tuple(Stage(*stage) for stage in stages)

    @property
    def selection_split(self) -> str:
        """The split parent selection scores on: val where the domain has one, else train."""
        return "val" if "val" in self.splits else "train"

    def full_splits(self) -> list[str]:
        """The splits a full evaluation covers, in order: never test, which is evaluated once, at the
        end, for the node chosen on val (`loop.final_test`)."""
        return [s for s in ("train", "val") if s in self.splits]

    def format_inputs(self, row: dict) -> dict:
        """The agent's view of a row: only the declared input columns, never a label."""
        return {"domain": self.task or self.name, **{key: row[col] for key, col in self.inputs.items()}}

    # -- what the meta agent may read: train rows only -------------------------------------
    def try_lines(self, rows: pd.DataFrame) -> list[str]:
        """Train `rows` (a DataFrame) as the try command reads them, one JSON line each: the row's
        id, the agent's inputs, its label and how the command compares a prediction with it."""
        return [json.dumps({"id": str(r[self.question_id]), "inputs": self.format_inputs(r),
                            "label": r[self.label_column] if self.label_column else None, "match": self.try_match},
                           default=str)
                for r in rows.to_dict("records")]

    def feedback(self, predictions: pd.DataFrame, grades: pd.DataFrame | None = None) -> pd.DataFrame:
        """A train evaluation's `predictions` (a DataFrame) as later meta agents may read them: the
        columns hidden from agents dropped, except the label (theirs anyway for train rows), and for
        a graded domain each row's `grade`, the grader's verdict from `grades`."""
        hidden = [c for c in self.hidden_columns if c != self.label_column and c in predictions.columns]
        shown = predictions.drop(columns=hidden)
        if grades is not None:
            verdict = dict(zip(grades[self.question_id], grades["prediction"]))
            shown["grade"] = [verdict.get(q, "") for q in shown[self.question_id]]
        return shown
