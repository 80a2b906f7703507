"""The rows a harness run evaluates: a subset of a domain's data set, or the proofs of another run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from domains.harness.journal import PREDICTIONS, RESULT_COLUMNS
from services.errors import UserError

if TYPE_CHECKING:  # a Domain is only passed through here: no need to import pandas with it
    import pandas as pd

    from domains.base import Domain


def load_rows(domain: Domain, subset: str | None = None, proofs: Path | None = None,
              num_samples: int = -1) -> pd.DataFrame:
    """The data set to evaluate, cut to `num_samples` rows (-1 = all), as the seed does.

    With `proofs`, a grading domain (imo_proof_grading) grades the predictions of that run
    folder: its rows are that run's rows, each prediction as the domain's answers column.
    """
    from domains.data import load_csv
    from services.fsutil import csv_values

    if proofs is not None:
        source = Path(proofs) / PREDICTIONS
        found = csv_values(load_csv(source, [domain.question_id, "prediction"]))
        predictions = found.pop("prediction")
        rows = found.drop(columns=[c for c in RESULT_COLUMNS if c in found.columns])
        dataset = domain.rows_from(rows, predictions, source)
    else:
        dataset = domain.load(subset)
    if dataset[domain.question_id].duplicated().any():
        dup = list(dataset[domain.question_id][dataset[domain.question_id].duplicated()])[0]
        raise UserError(f"question id {dup!r} appears twice in column {domain.question_id!r}")
    return dataset if num_samples is None or num_samples < 0 else dataset.head(num_samples)
