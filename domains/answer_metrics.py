"""Scores of final-answer domains (imo_answer, aime2025, amo_bench): pure functions, no I/O.

A domain gives its checks as {score name: check(output, row, judge) -> bool}; the first
one is its `accuracy`. Each row's output is the agent's prediction, the row has the
reference; `judge` is an LLM judge (prompt -> reply) for answers no rule can check, or None.
A check that grades many rows at once (domains.judge.AnswerGrader: its LLM calls run side by
side) has `grade(outputs, rows, judge)`, giving verdicts that say what decided each row; the
main check's are counted in the report as `graded_by`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pandas as pd

from inside.answers import final_answer

Check = Callable[[str, dict, Callable | None], bool]


def answer_metrics(df: pd.DataFrame, checks: dict[str, Check], qid_col: str, pred_col: str = "prediction",
                   group_cols: tuple[str, ...] = (), judge: Callable | None = None) -> dict:
    """Accuracy under each check, the main one per group, and which questions passed."""
    missing = [c for c in (qid_col, pred_col) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s): {', '.join(missing)}")
    if len(df) == 0:
        raise ValueError("no rows to score")
    rows = df.to_dict("records")
    outputs = ["" if _missing(r.get(pred_col)) else str(r[pred_col]) for r in rows]
    main_name, by = next(iter(checks)), Counter()
    results = {name: _checked(check, outputs, rows, judge, by if name == main_name else Counter())
               for name, check in checks.items()}
    main = results[main_name]
    ids = [str(r[qid_col]) for r in rows]
    report = {
        "accuracy": sum(main) / len(main),
        "total_correct": sum(main),
        "total": len(main),
        **{name: sum(ok) / len(ok) for name, ok in list(results.items())[1:]},
        "no_answer": sum(1 for out in outputs if final_answer(out) is None),
        "question_ids_passed": [i for i, ok in zip(ids, main) if ok],
        "question_ids_failed": [i for i, ok in zip(ids, main) if not ok],
        "row_scores": {i: float(ok) for i, ok in zip(ids, main)},
    }
    if by:
        report["graded_by"] = dict(sorted(by.items()))
    for col in group_cols:
        if col in df.columns:
            groups: dict[str, list[bool]] = {}
            for value, ok in zip(df[col], main):
                groups.setdefault(str(value), []).append(ok)
            report[f"per_{col.lower().replace(' ', '_')}"] = {
                k: {"accuracy": sum(v) / len(v), "correct": sum(v), "total": len(v)} for k, v in sorted(groups.items())}
    return report


def _checked(check: Check, outputs: list[str], rows: list[dict], judge: Callable | None, by: Counter) -> list[bool]:
    """Whether each output passes `check`; `by` counts what decided, for a check that says."""
    if hasattr(check, "grade"):
        verdicts = check.grade(outputs, rows, judge)
        by.update(v.by for v in verdicts)
        return [bool(v.ok) for v in verdicts]
    return [bool(check(out, row, judge)) for out, row in zip(outputs, rows)]


def format_answers(report: dict) -> str:
    lines = [f"accuracy        {report['accuracy']:6.1%}  ({report['total_correct']}/{report['total']})"]
    lines += [f"{name:<15} {value:6.1%}" for name, value in report.items()
              if name.startswith("accuracy_") and isinstance(value, float)]
    lines.append(f"no answer       {report['no_answer']:6d}  of {report['total']}")
    if report.get("graded_by"):
        lines.append("graded by       " + ", ".join(f"{how} {n}" for how, n in report["graded_by"].items()))
    for key, groups in report.items():
        if key.startswith("per_") and isinstance(groups, dict):
            lines.append("")
            lines += [f"{name:<22} {g['accuracy']:6.1%}  ({g['correct']}/{g['total']})" for name, g in groups.items()]
    return "\n".join(lines)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value) or str(value) in ("", "None")
