"""The rows a harness run evaluates: a subset of a domain's data set, or the proofs of another run."""

from __future__ import annotations

from pathlib import Path

from domains.base import Domain
from domains.harness.journal import PREDICTIONS, RESULT_COLUMNS
from services.errors import UserError


def load_rows(domain: Domain, subset: str | None = None, proofs: Path | None = None, num_samples: int = -1):
    """The data set to evaluate, cut to `num_samples` rows (-1 = all), as the seed does.

    A domain without data of its own (imo_proof_grading) grades the predictions of the run
    folder `proofs`: its rows are that run's rows, the prediction as the `Response`.
    """
    from domains.imo.data import load_csv

    if domain.data_dir is None and domain.loader is None:
        if not proofs:
            raise UserError(f"domain {domain.name} grades another run's proofs: pass --proofs_dname RUN_DIR")
        source = Path(proofs) / PREDICTIONS
        found = load_csv(source, [domain.question_id, "Problem", "prediction"])
        dataset = found.drop(columns=[c for c in RESULT_COLUMNS if c in found.columns])
        dataset["Response"] = found["prediction"]
        missing = [c for c in domain.required_columns() if c not in dataset.columns]
        if missing:
            raise UserError(f"{source} lacks column(s) {', '.join(missing)} needed by {domain.name}")
    else:
        dataset = domain.load(subset)
    if dataset[domain.question_id].duplicated().any():
        dup = dataset[domain.question_id][dataset[domain.question_id].duplicated()].iloc[0]
        raise UserError(f"question id {dup!r} appears twice in column {domain.question_id!r}")
    return dataset if num_samples is None or num_samples < 0 else dataset.head(num_samples)
