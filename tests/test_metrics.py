import json

import pandas as pd
import pytest

from domains.metrics import (
    format_grading,
    format_proof,
    grading_metrics,
    normalize_label,
    proof_metrics,
)

NAN = float("nan")


@pytest.mark.parametrize("raw, expected", [
    ("correct", "correct"),
    ("Correct ", "correct"),
    ("CORRECT", "correct"),
    (" Partial \n", "partial"),
    ("Almost", "almost"),
    ("incorrect", "incorrect"),
    ("", None),
    ("   ", None),
    ("correct.", None),
    ("The proof is correct", None),
    ("in correct", None),
    ("nan", None),  # what a CSV round trip makes of a missing prediction
    (NAN, None),
    (None, None),
    (7, None),
])
def test_normalize_label(raw, expected):
    assert normalize_label(raw) == expected


def grading_df():
    # id   truth      prediction        parsed     points t/p  |error|  pass
    # g1   Incorrect  "incorrect"       incorrect  0/0         0        yes
    # g2   Incorrect  "partial"         partial    0/1         1
    # g3   Incorrect  "garbage grade"   invalid    0/-         7
    # g4   Partial    " Partial "       partial    1/1         0        yes
    # g5   Partial    ""                invalid    1/-         7
    # g6   Almost     "correct"         correct    6/7         1
    # g7   Almost     NaN               invalid    6/-         7
    # g8   Correct    "Correct "        correct    7/7         0        yes
    # g9   Correct    "CORRECT"         correct    7/7         0        yes
    # g10  Correct    "almost"          almost     7/6         1
    return pd.DataFrame({
        "Grading ID": [f"g{i}" for i in range(1, 11)],
        "Reward": ["Incorrect", "Incorrect", "Incorrect", "Partial", "Partial",
                   "Almost", "Almost", "Correct", "Correct", "Correct"],
        "prediction": ["incorrect", "partial", "garbage grade", " Partial ", "",
                       "correct", NAN, "Correct ", "CORRECT", "almost"],
    })


def test_grading_accuracy_and_ids():
    r = grading_metrics(grading_df())
    # passed: g1, g4, g8, g9 -> 4 / 10
    assert r["total"] == 10
    assert r["total_correct"] == 4
    assert r["overall_accuracy"] == pytest.approx(0.4)
    assert r["question_ids_passed"] == ["g1", "g4", "g8", "g9"]
    assert r["question_ids_failed"] == ["g2", "g3", "g5", "g6", "g7", "g10"]


def test_grading_mae_counts_invalid_as_max_error():
    r = grading_metrics(grading_df())
    # MAE = (0+1+7+0+7+1+7+0+0+1)/10/7 = 24/70
    assert r["normalized_mean_absolute_error"] == pytest.approx(24 / 70)


def test_grading_invalid_predictions():
    r = grading_metrics(grading_df())
    # garbage (g3), empty string (g5), NaN (g7); "Correct " and "CORRECT" are valid
    assert r["invalid_predictions"] == 3
    assert r["invalid_ids"] == ["g3", "g5", "g7"]


def test_grading_per_label():
    r = grading_metrics(grading_df())
    assert list(r["per_label"]) == ["incorrect", "partial", "almost", "correct"]
    # incorrect: tp 1 (g1), predicted 1 (g1), support 3 -> P 1, R 1/3, F1 2*(1/3)/(4/3) = 1/2
    # partial:   tp 1 (g4), predicted 2 (g2,g4), support 2 -> P 1/2, R 1/2, F1 1/2
    # almost:    tp 0, predicted 1 (g10), support 2 -> P 0, R 0, F1 0
    # correct:   tp 2 (g8,g9), predicted 3 (g6,g8,g9), support 3 -> P 2/3, R 2/3, F1 2/3
    expected = {
        "incorrect": (1.0, 1 / 3, 0.5, 3, 1, 1),
        "partial": (0.5, 0.5, 0.5, 2, 2, 1),
        "almost": (0.0, 0.0, 0.0, 2, 1, 0),
        "correct": (2 / 3, 2 / 3, 2 / 3, 3, 3, 2),
    }
    for label, (p, rec, f1, support, predicted, tp) in expected.items():
        s = r["per_label"][label]
        assert s["precision"] == pytest.approx(p), label
        assert s["recall"] == pytest.approx(rec), label
        assert s["f1"] == pytest.approx(f1), label
        assert (s["support"], s["predicted"], s["correct"]) == (support, predicted, tp), label


def test_grading_confusion_matrix():
    cm = grading_metrics(grading_df())["confusion_matrix"]
    assert cm["labels"] == ["incorrect", "partial", "almost", "correct"]
    assert cm["rows"] == "truth"
    assert cm["cols"] == "prediction"
    # rows truth, columns prediction; invalid predictions kept apart
    assert cm["matrix"] == [
        [1, 1, 0, 0],  # g1 incorrect, g2 partial (g3 invalid)
        [0, 1, 0, 0],  # g4 partial (g5 invalid)
        [0, 0, 0, 1],  # g6 correct (g7 invalid)
        [0, 0, 1, 2],  # g10 almost, g8 g9 correct
    ]
    assert cm["invalid_by_truth"] == {"incorrect": 1, "partial": 1, "almost": 1, "correct": 0}


def test_grading_label_distribution_and_random_guess():
    r = grading_metrics(grading_df())
    # truth 3/2/2/3 of 10
    assert r["label_distribution"]["ground_truth"] == pytest.approx(
        {"incorrect": 0.3, "partial": 0.2, "almost": 0.2, "correct": 0.3})
    # predicted incorrect 1, partial 2, almost 1, correct 3, invalid 3 of 10
    assert r["label_distribution"]["prediction"] == pytest.approx(
        {"incorrect": 0.1, "partial": 0.2, "almost": 0.1, "correct": 0.3, "invalid": 0.3})
    # 0.3^2 + 0.2^2 + 0.2^2 + 0.3^2 = 0.26
    assert r["random_guess_accuracy"] == pytest.approx(0.26)


def test_grading_undefined_precision_and_recall_are_zero():
    # Nothing predicted as partial/almost (precision undefined) and no truth
    # row is incorrect (recall undefined): both become 0.0, not an error.
    df = pd.DataFrame({
        "Grading ID": [1, 2, 3, 4, 5, 6],
        "Reward": ["Correct", "Correct", "Correct", "Partial", "Almost", "Almost"],
        "prediction": ["correct", "correct", "incorrect", "correct", "correct", "correct"],
    })
    r = grading_metrics(df)
    assert r["per_label"]["partial"] == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0, "correct": 0}
    assert r["per_label"]["incorrect"] == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0, "predicted": 1, "correct": 0}
    # correct: tp 2, predicted 5, support 3 -> P 2/5, R 2/3, F1 2*(4/15)/(16/15) = 1/2
    assert r["per_label"]["correct"]["f1"] == pytest.approx(0.5)
    # ids are returned as strings
    assert r["question_ids_passed"] == ["1", "2"]
    # MAE = (0+0+7+6+1+1)/6/7 = 15/42
    assert r["normalized_mean_absolute_error"] == pytest.approx(15 / 42)
    # truth 3/6, 1/6, 2/6: (9+1+4)/36
    assert r["random_guess_accuracy"] == pytest.approx(14 / 36)


def test_grading_custom_columns_and_json_serialisable():
    df = grading_df().rename(columns={"Grading ID": "qid", "Reward": "label", "prediction": "pred"})
    r = grading_metrics(df, label_col="label", qid_col="qid", pred_col="pred")
    assert r["total_correct"] == 4
    assert json.loads(json.dumps(r))["total_correct"] == 4


def test_grading_invalid_truth_raises_naming_ids():
    df = grading_df()
    df.loc[1, "Reward"] = "Wrong"
    df.loc[4, "Reward"] = NAN
    with pytest.raises(ValueError, match=r"g2, g5"):
        grading_metrics(df)


def test_grading_empty_raises():
    with pytest.raises(ValueError, match="no rows to score"):
        grading_metrics(grading_df().iloc[0:0])


def test_grading_missing_column_raises():
    with pytest.raises(ValueError, match="prediction"):
        grading_metrics(grading_df().drop(columns=["prediction"]))


def proof_df():
    # id  level       category       prediction  points  full marks
    # p1  IMO-hard    Combinatorics  correct     7       yes
    # p2  pre-IMO     Algebra        Correct     7       yes
    # p3  pre-IMO     Algebra        partial     1
    # p4  IMO-easy    Combinatorics  "Almost "   6
    # p5  IMO-easy    Algebra        incorrect   0
    # p6  IMO-medium  Geometry       "banana"    0 (invalid)
    # p7  IMO-medium  Geometry       CORRECT     7       yes
    # p8  IMO-hard    Number theory  NaN         0 (invalid)
    return pd.DataFrame({
        "Problem ID": [f"p{i}" for i in range(1, 9)],
        "Level": ["IMO-hard", "pre-IMO", "pre-IMO", "IMO-easy", "IMO-easy",
                  "IMO-medium", "IMO-medium", "IMO-hard"],
        "Category": ["Combinatorics", "Algebra", "Algebra", "Combinatorics", "Algebra",
                     "Geometry", "Geometry", "Number theory"],
        "prediction": ["correct", "Correct", "partial", "Almost ", "incorrect",
                       "banana", "CORRECT", NAN],
    })


def test_proof_overall():
    r = proof_metrics(proof_df())
    # points (7+7+1+6+0+0+7+0) / (7*8) = 28/56
    assert r["points_percentage"] == pytest.approx(0.5)
    # full marks p1, p2, p7 -> 3/8
    assert r["correct_percentage"] == pytest.approx(3 / 8)
    assert r["total"] == 8
    assert r["invalid_predictions"] == 2
    assert r["invalid_ids"] == ["p6", "p8"]
    assert r["question_ids_passed"] == ["p1", "p2", "p7"]
    assert r["question_ids_failed"] == ["p3", "p4", "p5", "p6", "p8"]
    # incorrect 1, partial 1, almost 1, correct 3, invalid 2 of 8
    assert r["label_distribution"] == {"prediction": pytest.approx(
        {"incorrect": 1 / 8, "partial": 1 / 8, "almost": 1 / 8, "correct": 3 / 8, "invalid": 2 / 8})}


def test_proof_per_level_in_difficulty_order():
    per_level = proof_metrics(proof_df())["per_level"]
    assert list(per_level) == ["pre-IMO", "IMO-easy", "IMO-medium", "IMO-hard"]
    # pre-IMO p2 p3: 8/14, 1/2 | IMO-easy p4 p5: 6/14, 0 | IMO-medium p6 p7: 7/14, 1/2 | IMO-hard p1 p8: 7/14, 1/2
    expected = {
        "pre-IMO": (8 / 14, 0.5, 2),
        "IMO-easy": (6 / 14, 0.0, 2),
        "IMO-medium": (0.5, 0.5, 2),
        "IMO-hard": (0.5, 0.5, 2),
    }
    for level, (points, correct, total) in expected.items():
        s = per_level[level]
        assert s["points_percentage"] == pytest.approx(points), level
        assert s["correct_percentage"] == pytest.approx(correct), level
        assert s["total"] == total, level


def test_proof_per_category_in_order_of_appearance():
    per_category = proof_metrics(proof_df())["per_category"]
    assert list(per_category) == ["Combinatorics", "Algebra", "Geometry", "Number theory"]
    # Combinatorics p1 p4: 13/14, 1/2 | Algebra p2 p3 p5: 8/21, 1/3 | Geometry p6 p7: 7/14, 1/2 | NT p8: 0, 0
    expected = {
        "Combinatorics": (13 / 14, 0.5, 2),
        "Algebra": (8 / 21, 1 / 3, 3),
        "Geometry": (0.5, 0.5, 2),
        "Number theory": (0.0, 0.0, 1),
    }
    for category, (points, correct, total) in expected.items():
        s = per_category[category]
        assert s["points_percentage"] == pytest.approx(points), category
        assert s["correct_percentage"] == pytest.approx(correct), category
        assert s["total"] == total, category


def test_proof_without_level_or_category_columns():
    r = proof_metrics(proof_df().drop(columns=["Level", "Category"]))
    assert r["per_level"] == {}
    assert r["per_category"] == {}
    assert r["points_percentage"] == pytest.approx(0.5)


def test_proof_missing_level_value_grouped_as_unknown():
    df = proof_df()
    df.loc[0, "Level"] = None
    per_level = proof_metrics(df)["per_level"]
    # p1 (7 points) moves out of IMO-hard, leaving p8 (0 points) there
    assert per_level["unknown"] == {"points_percentage": 1.0, "correct_percentage": 1.0, "total": 1}
    assert per_level["IMO-hard"]["points_percentage"] == 0.0
    assert list(per_level)[-1] == "unknown"


def test_proof_empty_raises():
    with pytest.raises(ValueError, match="no rows to score"):
        proof_metrics(proof_df().iloc[0:0])


def test_format_grading_report():
    text = format_grading(grading_metrics(grading_df()))
    lines = text.splitlines()
    assert lines[0] == "accuracy         40.0%  (4/10)"
    assert lines[1] == "normalized MAE   0.343"
    assert lines[2] == "invalid              3  of 10"
    assert lines[3] == "random guess     26.0%"
    assert "incorrect      1.000   0.333  0.500        3         1" in lines
    # confusion row for truth "almost": g6 predicted correct, g7 invalid
    assert "almost             0         0         0         1         1" in lines
    table = lines[lines.index("confusion (rows: truth, columns: prediction)") + 1:]
    assert len({len(line) for line in table}) == 1


def test_format_proof_report():
    text = format_proof(proof_metrics(proof_df()))
    lines = text.splitlines()
    assert lines[:3] == ["points    50.0%", "correct   37.5%", "invalid       2  of 8"]
    assert "pre-IMO          57.1%    50.0%      2" in lines
    assert "Number theory     0.0%     0.0%      1" in lines


def test_each_domain_formats_its_report_with_its_own_scorer():
    from domains.registry import get_domain

    proofs = proof_metrics(proof_df())
    # imo_proof is graded: its report is the grading domain's, and reads as such
    assert get_domain("imo_proof").format_report(proofs) == format_proof(proofs)
    assert get_domain("imo_grading").format_report(grading_metrics(grading_df())).startswith("accuracy         40.0%")
    assert get_domain("aime2025").format_report({"accuracy": 0.5, "total_correct": 1, "total": 2, "no_answer": 0,
                                                 "accuracy_any_number": 1.0}).splitlines()[:2] == [
        "accuracy         50.0%  (1/2)", "accuracy_any_number 100.0%"]

