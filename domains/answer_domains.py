"""The final-answer domains: IMO-AnswerBench, AIME 2025 and AMO-Bench.

The agent sees the problem only; its prediction is checked against the reference
answer by `inside.answers` (math-verify), or by an LLM answer grader (domains.judge). Each
is a `Domain` like the IMO ones: the loop and the harness know nothing special about them.

IMO-AnswerBench comes scored three ways, one domain each (same rows, same splits):
- imo_answer: by rule (inside.answers.check_output), no model call; what the meta agent's
  try command uses too.
- imo_answer_judged: as the IMO-Bench paper grades, an LLM grader on every output.
- imo_answer_hybrid: the rule settles the outputs it is sure are right; the LLM grader the rest
  (fewer calls; the same grade wherever the rule is right to be sure).
The judged ones report the rule's score beside theirs (accuracy_rule) and what decided each row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial

import pandas as pd

from domains import amo_bench
from domains.answer_metrics import Check, answer_metrics, format_answers
from domains.base import DATA_FILES, Domain
from domains.data import load_csv, verify_file
from domains.imo.data import DATA_DIR
from domains.judge import AnswerGrader
from domains.scoring import ByRule, Judged, Scorer
from inside.answers import aime_any_number, aime_strict, check_output
from services.errors import UserError

AIME_FILE = DATA_DIR.parent.parent / "aime2025" / "data" / "aime2025.jsonl"
AIME_SUBSETS = {"": None, "_I": "AIME2025-I", "_II": "AIME2025-II"}


def load_answerbench(suffix: str) -> pd.DataFrame:
    from domains.imo.answerbench_split import SOURCE, load_split

    df = load_csv(SOURCE, ["Problem ID", "Problem", "Short Answer", "Category"])
    ids = load_split()[suffix.lstrip("_")]
    return df.set_index("Problem ID").loc[ids].reset_index()


def load_aime(suffix: str) -> pd.DataFrame:
    """AIME 2025 (checksum verified); suffix _I or _II keeps one exam."""
    if not AIME_FILE.is_file():
        raise UserError(f"data file not found: {AIME_FILE}")
    verify_file(AIME_FILE)
    df = pd.DataFrame([json.loads(line) for line in AIME_FILE.read_text().splitlines() if line.strip()])
    df = df.astype(str)
    exam = AIME_SUBSETS[suffix]
    return pd.DataFrame(df[df["subset"] == exam].reset_index(drop=True)) if exam else df


def aime_tasks(subset: str | None = None, problem_numbers: list[int] | None = None) -> pd.DataFrame:
    """The benchmark's selection helpers: one exam (I or II) and/or some problem numbers."""
    df = load_aime(f"_{subset}" if subset else "")
    if problem_numbers:
        df = pd.DataFrame(df[df["problem_number"].astype(int).isin(problem_numbers)].reset_index(drop=True))
    return df


def load_amo(suffix: str) -> pd.DataFrame:
    return amo_bench.load(DATA_FILES.get("amo_bench"))


def _answer(column: str, check: Callable[[str, str], bool]) -> Check:
    """A check(output, row, judge) of `output` against the row's reference in `column`, by rule."""
    return lambda output, row, judge: check(output, str(row[column]))


def imo_answer(name: str, scorer: Scorer, note: str = "") -> Domain:
    """IMO-AnswerBench v2 under one of its scorers. Whichever it is, the agent is given the same
    inputs, domain "imo_answer" included: how it is scored is not the agent's to see."""
    return Domain(
        name=name,
        question_id="Problem ID",
        inputs={"problem": "Problem"},
        label_column="Short Answer",
        hidden_columns=("Short Answer",),
        subsets={f"_{s}": "answerbench_v2.csv" for s in ("train", "val", "test")},
        splits={s: f"_{s}" for s in ("train", "val", "test")},
        score_key="accuracy",
        data_dir=DATA_DIR,
        scorer=scorer,
        default_subset="train",
        loader=load_answerbench,
        task="imo_answer",
        try_match="math",
        score_note=note,
    )


def _answerbench(checks: dict[str, Check], judged: bool) -> ByRule:
    metrics = partial(answer_metrics, checks=checks, qid_col="Problem ID", group_cols=("Category",))
    return (Judged if judged else ByRule)(metrics, format_answers)


_BY_RULE = _answer("Short Answer", check_output)
_GRADED = ("graded by an LLM (role judge, temperature 0, cached) with a prompt built as the IMO-Bench paper's "
           "AnswerAutoGrader")

DOMAINS = (
    imo_answer("imo_answer", _answerbench({"accuracy": _BY_RULE}, judged=False),
               "by rule: math-verify where it is sure, else wrong (the paper grades with an LLM: imo_answer_judged)"),
    imo_answer("imo_answer_judged", _answerbench({
        "accuracy": AnswerGrader("Short Answer", "Problem", rule_first=False), "accuracy_rule": _BY_RULE}, judged=True),
        f"{_GRADED}, every output, as in the paper; accuracy_rule is math-verify's score beside it"),
    imo_answer("imo_answer_hybrid", _answerbench({
        "accuracy": AnswerGrader("Short Answer", "Problem", rule_first=True), "accuracy_rule": _BY_RULE}, judged=True),
        f"math-verify where it is sure the answer is right, else {_GRADED}; accuracy_rule is math-verify's alone"),
    Domain(
        name="aime2025",
        question_id="task_id",
        inputs={"problem": "question"},
        label_column="ground_truth",
        hidden_columns=("ground_truth",),
        subsets={s: AIME_FILE.name for s in AIME_SUBSETS},
        splits={"train": ""},
        score_key="accuracy",
        data_dir=AIME_FILE.parent,
        scorer=ByRule(partial(answer_metrics, checks={"accuracy": _answer("ground_truth", aime_strict),
                                                      "accuracy_any_number": _answer("ground_truth", aime_any_number)},
                              qid_col="task_id", group_cols=("subset",)), format_answers),
        loader=load_aime,
        try_match="math",
        score_note="strict: only the last answer the output commits to counts (a \\boxed{} or an \"answer is\", a "
                   "later one overriding an earlier one; one integer: inside.answers.aime_strict); the benchmark's "
                   "own rule (any number in the output equal to the answer) is reported as accuracy_any_number and "
                   "never optimized: an evolving agent learns to list many numbers when any match counts",
    ),
    Domain(
        name="amo_bench",
        question_id="question_id",
        inputs={"problem": "prompt"},
        label_column="answer",
        hidden_columns=("answer", "solution"),
        subsets={"": "--data"},
        splits={"train": ""},
        score_key="accuracy",
        # pyright binds the Callable field `lines` Judged inherits from ByRule as a method, so misreads it.
        scorer=Judged(partial(answer_metrics, checks={"accuracy": amo_bench.check}, qid_col="question_id",  # pyright: ignore[reportArgumentType]
                              group_cols=("answer_type",)), format_answers),
        loader=load_amo,
        try_match="math",
    ),
)
