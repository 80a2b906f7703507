"""Scores for IMO-GradingBench and IMO-ProofBench predictions: pure functions, no I/O.

Every returned value is a plain int, float, str, list or dict, so a report can
be written with `json.dump` as is. `row_scores` gives each question's share of the
score (in [0, 1], their mean is the score): paired comparisons and intervals use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import pandas as pd

from services.choices import LabelCase

LABELS = ("incorrect", "partial", "almost", "correct")
POINTS = {"incorrect": 0, "partial": 1, "almost": 6, "correct": 7}
MAX_POINTS = 7
INVALID = "invalid"
# Difficulty order of IMO-ProofBench levels, so reports read from easy to hard
# rather than alphabetically.
LEVEL_ORDER = ("pre-IMO", "IMO-easy", "IMO-medium", "IMO-hard")


LABEL_CASES = tuple(LabelCase)  # harness.label_case: how a grader's proof labels are read


def normalize_label(x: object) -> str | None:
    """One of LABELS, or None when `x` is not exactly a label after strip and lower-case.

    Agents answer "Correct", " partial\\n" or "CORRECT"; anything else (prose,
    empty, NaN) is an invalid prediction rather than a guess at what was meant.
    """
    if not isinstance(x, str):
        return None
    label = x.strip().lower()
    return label if label in POINTS else None


def exact_label(x: object) -> str | None:
    """One of LABELS when `x` is one as written, else None: the reference's reading of a grader's
    proof labels (domains/imo/proof_eval.py there maps the four lower-case words and nothing else),
    so "Correct", "CORRECT" and " correct" are no label."""
    return x if isinstance(x, str) and x in POINTS else None


def label_reader(label_case: str) -> Callable[[object], str | None]:
    """How labels are read under `label_case` (one of LABEL_CASES)."""
    if label_case not in LABEL_CASES:
        raise ValueError(f"label_case is {label_case!r}, not one of {', '.join(LABEL_CASES)}")
    return exact_label if label_case == LabelCase.EXACT else normalize_label


def grading_metrics(df: pd.DataFrame, label_col: str = "Reward", qid_col: str = "Grading ID",
                    pred_col: str = "prediction") -> dict:
    """Accuracy, normalized MAE, per-label scores and confusion matrix of predicted grades.

    An invalid prediction counts as wrong and as the maximum point error, so an
    agent cannot gain by answering garbage on rows it is unsure of. An invalid
    ground-truth label is bad data and raises ValueError naming the rows. Grades are
    read after strip and lower-case under either harness.label_case, as the reference's
    domains/report.py reads them (its data's labels are capitalised: "Correct").
    """
    _require_rows(df, (label_col, qid_col, pred_col))
    ids = [str(q) for q in df[qid_col]]
    truths = [normalize_label(t) for t in df[label_col]]
    bad = [i for i, t in zip(ids, truths) if t is None]
    if bad:
        raise ValueError(f"invalid ground-truth {label_col!r} for {qid_col} {', '.join(bad)}")
    truths = [t for t in truths if t is not None]  # every one of them: a bad one raised above
    preds = [normalize_label(p) for p in df[pred_col]]
    total = len(ids)

    passed = [i for i, t, p in zip(ids, truths, preds) if p == t]
    invalid_ids = [i for i, p in zip(ids, preds) if p is None]
    errors = [
        MAX_POINTS if p is None else abs(POINTS[p] - POINTS[t])
        for t, p in zip(truths, preds)
    ]

    truth_fraction = {label: truths.count(label) / total for label in LABELS}
    pred_fraction = {label: preds.count(label) / total for label in LABELS}
    pred_fraction[INVALID] = len(invalid_ids) / total

    return {
        "overall_accuracy": len(passed) / total,
        "total_correct": len(passed),
        "total": total,
        "normalized_mean_absolute_error": sum(errors) / total / MAX_POINTS,
        "invalid_predictions": len(invalid_ids),
        "invalid_ids": invalid_ids,
        "per_label": {label: _label_scores(truths, preds, label) for label in LABELS},
        "confusion_matrix": _confusion(truths, preds),
        "label_distribution": {"ground_truth": truth_fraction, "prediction": pred_fraction},
        # Accuracy of guessing each label with its ground-truth frequency, the
        # baseline the HyperAgents report compares against.
        "random_guess_accuracy": sum(p * p for p in truth_fraction.values()),
        "question_ids_passed": passed,
        "question_ids_failed": [i for i, t, p in zip(ids, truths, preds) if p != t],
        "row_scores": {i: float(p == t) for i, t, p in zip(ids, truths, preds)},
    }


def _confusion(truths: list[str], preds: list[str | None]) -> dict:
    """Truth by prediction counts over LABELS, and the invalid predictions by truth."""
    matrix = [[0] * len(LABELS) for _ in LABELS]
    invalid_by_truth: dict[str, int] = dict.fromkeys(LABELS, 0)
    for t, p in zip(truths, preds):
        if p is None:
            invalid_by_truth[t] += 1
        else:
            matrix[LABELS.index(t)][LABELS.index(p)] += 1
    return {"labels": list(LABELS), "rows": "truth", "cols": "prediction", "matrix": matrix,
            "invalid_by_truth": invalid_by_truth}


def proof_metrics(df: pd.DataFrame, qid_col: str = "Problem ID", pred_col: str = "prediction",
                  label_case: str = "lenient") -> dict:
    """Points and full-marks rate of proofs, from the grader's label in `pred_col`.

    An invalid grader label scores 0 points: a proof the grader could not
    judge earns nothing. `label_case` says what is a label: `lenient` reads it after
    strip and lower-case, `exact` only as written (the reference's reading).
    `per_level` and `per_category` break the scores down by the `Level` and
    `Category` columns, and are empty when a column is absent.
    """
    _require_rows(df, (qid_col, pred_col))
    ids = [str(q) for q in df[qid_col]]
    read = label_reader(label_case)
    preds = [read(p) for p in df[pred_col]]
    points = [0 if p is None else POINTS[p] for p in preds]
    total = len(ids)

    pred_fraction = {label: preds.count(label) / total for label in LABELS}
    pred_fraction[INVALID] = preds.count(None) / total

    return {
        **_points_scores(points),
        "invalid_predictions": preds.count(None),
        "invalid_ids": [i for i, p in zip(ids, preds) if p is None],
        "label_case": label_case,
        "label_distribution": {"prediction": pred_fraction},
        "per_level": _points_by_group(df, "Level", points, LEVEL_ORDER),
        "per_category": _points_by_group(df, "Category", points, ()),
        "question_ids_passed": [i for i, pt in zip(ids, points) if pt == MAX_POINTS],
        "question_ids_failed": [i for i, pt in zip(ids, points) if pt != MAX_POINTS],
        "row_scores": {i: pt / MAX_POINTS for i, pt in zip(ids, points)},
    }


def _require_rows(df: pd.DataFrame, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s): {', '.join(missing)}")
    if len(df) == 0:
        raise ValueError("no rows to score")


def _label_scores(truths: list, preds: list, label: str) -> dict:
    tp = sum(1 for t, p in zip(truths, preds) if t == label and p == label)
    support = truths.count(label)
    predicted = preds.count(label)
    precision = tp / predicted if predicted else 0.0
    recall = tp / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "support": support, "predicted": predicted, "correct": tp}


def _points_scores(points: list) -> dict:
    total = len(points)
    return {
        "points_percentage": sum(points) / (MAX_POINTS * total),
        "correct_percentage": points.count(MAX_POINTS) / total,
        "total": total,
    }


def _points_by_group(df: pd.DataFrame, column: str, points: list, order: tuple) -> dict:
    if column not in df.columns:
        return {}
    groups: dict[str, list] = {}
    for value, pt in zip(df[column], points):
        groups.setdefault(_group_key(value), []).append(pt)
    # Known values first in their given order, the rest as they first appear.
    keys = sorted(groups, key=lambda k: order.index(k) if k in order else len(order))
    return {k: _points_scores(groups[k]) for k in keys}


def _group_key(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    return str(value)


def format_grading(report: dict) -> str:
    """A grading_metrics report as a few fixed-width lines."""
    lines = [
        f"accuracy        {report['overall_accuracy']:6.1%}  ({report['total_correct']}/{report['total']})",
        f"normalized MAE  {report['normalized_mean_absolute_error']:6.3f}",
        f"invalid         {report['invalid_predictions']:6d}  of {report['total']}",
        f"random guess    {report['random_guess_accuracy']:6.1%}",
        "",
        f"{'label':<10} {'precision':>9} {'recall':>7} {'f1':>6} {'support':>8} {'predicted':>9}",
    ]
    for label, s in report["per_label"].items():
        lines.append(f"{label:<10} {s['precision']:9.3f} {s['recall']:7.3f} {s['f1']:6.3f}"
                     f" {s['support']:8d} {s['predicted']:9d}")
    cm = report["confusion_matrix"]
    lines += ["", "confusion (rows: truth, columns: prediction)",
              f"{'':<10}" + "".join(f"{c:>10}" for c in [*cm["labels"], INVALID])]
    for label, row in zip(cm["labels"], cm["matrix"]):
        lines.append(f"{label:<10}" + "".join(f"{n:>10d}" for n in [*row, cm["invalid_by_truth"][label]]))
    return "\n".join(lines)


def format_proof(report: dict) -> str:
    """A proof_metrics report as a few fixed-width lines."""
    lines = [
        f"points   {report['points_percentage']:6.1%}",
        f"correct  {report['correct_percentage']:6.1%}",
        f"invalid  {report['invalid_predictions']:6d}  of {report['total']}",
    ]
    for title, groups in (("level", report["per_level"]), ("category", report["per_category"])):
        if groups:
            lines += ["", f"{title:<14} {'points':>7} {'correct':>8} {'total':>6}"]
            lines += [f"{k:<14} {s['points_percentage']:7.1%} {s['correct_percentage']:8.1%} {s['total']:6d}"
                      for k, s in groups.items()]
    return "\n".join(lines)
