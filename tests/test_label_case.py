"""harness.label_case: how graders' proof labels are read, against the reference's readings written out.

The reference scores imo_proof from the grader's labels with a plain map of the four lower-case words
(domains/imo/proof_eval.py there: anything else, "Correct" too, is 0 points), and imo_grading after
strip and lower-case (domains/report.py there). Prediction sets of 100 rows with the spellings graders
write are scored both ways: `exact` agrees with the reference on every set, `lenient` (the default)
differs wherever a set holds a label in another case or with spaces around it.
"""

import random
from types import SimpleNamespace

import pandas as pd
import pytest

from domains.imo.domains import GRADING_PROOFS
from domains.metrics import LABELS, exact_label, label_reader, normalize_label, proof_metrics
from domains.registry import get_domain
from domains.report import report
from domains.scoring import label_case
from services.config import Config

POINTS = {"incorrect": 0, "partial": 1, "almost": 6, "correct": 7}
SPELLINGS = [*LABELS, *(w.capitalize() for w in LABELS), *(w.upper() for w in LABELS),
             *(f" {w}\n" for w in LABELS), "None", "", "7", "almost correct"]
SETS = 6
ROWS = 100


def prediction_sets() -> list[pd.DataFrame]:
    """Six sets of 100 grader labels: mostly the four words as written, some in other cases or padded."""
    rng = random.Random(7)
    sets = []
    for n in range(SETS):
        share = n / (SETS - 1) * 0.2  # from none to a fifth of the rows spelled otherwise
        preds = [rng.choice(SPELLINGS) if rng.random() < share else rng.choice(LABELS) for _ in range(ROWS)]
        sets.append(pd.DataFrame({"Problem ID": [f"P{i}" for i in range(ROWS)], "prediction": preds,
                                  "Reward": [rng.choice(LABELS).capitalize() for _ in range(ROWS)]}))
    return sets


def reference_proof_scores(path) -> tuple[float, float]:
    """domains/imo/proof_eval.py of the reference, read from the CSV as it reads it."""
    df = pd.read_csv(path, dtype=str)
    points = df["prediction"].map(POINTS).fillna(0).astype(float)
    return points.sum() / (7 * len(df)), float((points == 7).sum() / len(df))


def reference_grading_scores(path) -> tuple[float, float]:
    """domains/report.py of the reference for imo_grading: accuracy and normalized MAE."""
    df = pd.read_csv(path, dtype=str)
    df = df[df["prediction"] != ""].copy()
    df["prediction"] = df["prediction"].str.strip().str.lower()
    df["Reward"] = df["Reward"].str.strip().str.lower()
    accuracy = float((df["Reward"] == df["prediction"]).mean())
    error = (df["prediction"].map(POINTS).astype(float) - df["Reward"].map(POINTS).astype(float)).abs().fillna(7)
    return accuracy, float(error.mean() / 7)


def tools(case: str | None) -> SimpleNamespace:
    config = Config()
    if case is not None:
        config.harness.label_case = case  # the field harness.label_case, set as a run's config sets it
    return SimpleNamespace(config=config)


def written(tmp_path, n: int, df: pd.DataFrame):
    path = tmp_path / f"set{n}" / "predictions.csv"
    path.parent.mkdir(exist_ok=True)
    df.to_csv(path, index=False)
    return path


def test_exact_reading_agrees_with_the_reference_on_every_set_and_lenient_does_not(tmp_path):
    differences: dict[str, list[int]] = {"exact": [], "lenient": []}  # per set: metrics unlike the reference's
    for n, df in enumerate(prediction_sets()):
        path = written(tmp_path, n, df)
        reference = reference_proof_scores(path)
        for case, found in differences.items():
            r = GRADING_PROOFS.scorer.score(GRADING_PROOFS, path, tools(case))
            assert r["label_case"] == case
            ours = (r["points_percentage"], r["correct_percentage"])
            found.append(sum(a != pytest.approx(b) for a, b in zip(ours, reference)))
    assert differences["exact"] == [0] * SETS
    lenient = differences["lenient"]
    assert lenient[0] == 0 and all(lenient[1:])  # every set with labels spelled otherwise differs
    print(f"metrics unlike the reference's, per set of {ROWS} rows: {differences}")


def test_grading_accuracy_reads_case_leniently_as_the_reference_does(tmp_path):
    grading = get_domain("imo_grading")
    for n, df in enumerate(prediction_sets()):
        path = written(tmp_path, n, df.assign(**{"Grading ID": df["Problem ID"]}))
        for case in ("lenient", "exact"):  # harness.label_case is for graders' proof labels only
            r = grading.scorer.score(grading, path, tools(case))
            ours = (r["overall_accuracy"], r["normalized_mean_absolute_error"])
            assert ours == pytest.approx(reference_grading_scores(path))


@pytest.mark.parametrize("text, exact, lenient", [
    ("correct", "correct", "correct"), ("Correct", None, "correct"), ("ALMOST", None, "almost"),
    (" partial\n", None, "partial"), ("incorrect", "incorrect", "incorrect"), ("None", None, None),
    (float("nan"), None, None), (7, None, None),
])
def test_one_label_read_both_ways(text, exact, lenient):
    assert exact_label(text) == label_reader("exact")(text) == exact
    assert normalize_label(text) == label_reader("lenient")(text) == lenient


def test_label_case_comes_from_the_callers_config_and_is_lenient_without_one():
    assert label_case(None) == "lenient"
    assert label_case(SimpleNamespace()) == "lenient"  # tools without a config
    assert label_case(tools(None)) == "lenient"  # a config without the field
    assert label_case(tools("exact")) == "exact"
    with pytest.raises(ValueError, match="label_case"):
        proof_metrics(prediction_sets()[0], label_case="Exact")


def test_the_standalone_report_reads_the_configs_label_case(tmp_path):
    pd.DataFrame({"Problem ID": ["a", "b"], "prediction": ["correct", "Correct"]}).to_csv(
        tmp_path / "predictions.csv", index=False)
    exact = tools("exact").config
    assert report(tmp_path, "imo_proof_grading", exact)["points_percentage"] == 0.5
    assert report(tmp_path, "imo_proof_grading", Config())["points_percentage"] == 1.0
