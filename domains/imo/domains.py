"""The IMO-Bench domains: grading proofs, writing proofs, and grading written proofs."""

from functools import partial

from domains import metrics
from domains.base import Domain
from domains.imo.data import DATA_DIR
from domains.scoring import ByRule, Graded

GRADING_INPUTS = {
    "problem": "Problem",
    "solution": "Solution",
    "grading_guidelines": "Grading guidelines",
    "student_answer": "Response",
}

# Grades the proofs of another run (its rows come from that run's predictions); scores imo_proof.
GRADING_PROOFS = Domain(
    name="imo_proof_grading",
    question_id="Problem ID",
    inputs=GRADING_INPUTS,
    label_column=None,
    hidden_columns=(),
    subsets={},
    splits={},
    score_key="points_percentage",
    # The grader's labels are read as harness.label_case says (the reference: exactly as written).
    scorer=ByRule(partial(metrics.proof_metrics, qid_col="Problem ID"), metrics.format_proof, reads_labels=True),
    model_role="grader",
    answers_column="Response",
)

DOMAINS = (
    Domain(
        name="imo_grading",
        question_id="Grading ID",
        inputs=GRADING_INPUTS,
        label_column="Reward",
        hidden_columns=("Points", "Reward"),
        subsets={f"_filtered_100_{s}": f"gradingbench_filtered_100_{s}.csv" for s in ("train", "val", "test")},
        splits={s: f"_filtered_100_{s}" for s in ("train", "val", "test")},
        score_key="overall_accuracy",
        data_dir=DATA_DIR,
        scorer=ByRule(partial(metrics.grading_metrics, label_col="Reward", qid_col="Grading ID"),
                      metrics.format_grading),
        default_subset="train",
    ),
    Domain(
        name="imo_proof",
        question_id="Problem ID",
        inputs={"problem": "Problem"},
        label_column=None,
        # The reference solution and its guidelines would hand the prover the answer.
        hidden_columns=("Solution", "Grading guidelines", "Short Answer"),
        subsets={"": "proofbench.csv", "_v2": "proofbench_v2.csv"},
        splits={"train": ""},
        score_key="points_percentage",
        data_dir=DATA_DIR,
        scorer=Graded(GRADING_PROOFS, "proofgrader.task_agent"),
    ),
    GRADING_PROOFS,
)
