"""AMO-Bench's rule-based grading (number, set and variable answers), as its official grader does it.

Source: the official repository, github.com/meituan-longcat/AMO-Bench (commit 52e1f37), `grading.py`
(`grading`, `verify_result`) and `utils.py` (`pred_extractor`, `pred_cut`, `verify_number_set_answer`,
`verify_variable_answer`, `append_try_list`). Written anew here, step for step:

- extraction (`extract`): the text after the last `</think>`, then after the last `</longcat_think>`;
  then the text after the last occurrence of the first "final answer" marker found (case-insensitive,
  "### the final answer is:" first, see `ANSWER_MARKERS`); size commands (\\left, \\bigl, ...)
  removed, full-width and typographic punctuation made ASCII, spaces and full stops before a `}`
  dropped; for number, set and variable answers thin spaces (\\, \\;) removed and lines joined; for
  number and variable answers commas removed and \\{ \\} \\[ \\] read as parentheses;
- a second try on the answer cut before `\\medskip` and `\\n---` (`cut`); either try may pass. The
  official cuts the extracted text, whose line breaks extraction already turned into spaces, so for
  these answer types only the `\\medskip` cut can take effect: so here too;
- number and set (`number_set_equal`): math-verify both ways, `verify(gold, pred)` or
  `verify(pred, gold)`, rounding floats to 4 decimals; and the same for what follows the last `=`
  of the parsed prediction;
- variable (`variable_equal`): the prediction's parsed expression (the part before its last
  \\qquad, then \\quad, then after its last `=`) and the reference's are each solved for `y` at
  fixed integer points, `y` evaluated numerically, and compared by math-verify both ways at 8
  decimals; every point must agree. The points are the official ones: problem 5 at n = 1..20,
  problem 37 at (a, b, c) = (k, k+1, k+2) for k = 2..18 (`OFFICIAL_POINTS`);
- an error anywhere in a check is a wrong answer.

Departures, each for a reason:
- a bare answer (no \\boxed, no $ or \\( delimiters) is also read as if it were boxed, and either
  reading may pass: our agents return the answer alone, the benchmark's models a whole response
  ending in "### The final answer is: \\boxed{...}", and math-verify reads a bare `n + 10^{-10}`
  as 10 and finds nothing in a bare `(x+1)^2`;
- a variable answer of a problem the official grader has no points for (data given with --data)
  gets the same kind of points, over the reference's own variables (`points_for`): the official
  grader fails every answer there;
- math-verify 0.9 (the project's pin) instead of 0.8; its timeouts (5 s to parse, 5 s to compare)
  and the official 30 s bound on solving are kept, and the whole check runs in a child process
  (`domains/amo_bounded.py`) that is killed past its own limit.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from types import FrameType

    from sympy import Basic

# It warns on every call made without a timeout.
logging.getLogger("math_verify").setLevel(logging.ERROR)

THINK_ENDS = ("</think>", "</longcat_think>")
# The order is the official one: with a colon before without, "the final answer" before
# "final answer", "is" before none; all with the "### " heading first, then without it.
ANSWER_MARKERS = tuple(f"{hashes}{lead}{verb}{colon}" for hashes in ("### ", "") for colon in (":", "")
                       for lead in ("the final answer", "final answer") for verb in (" is", ""))
SIZE_COMMANDS = ("\\biggl", "\\biggr", "\\Biggl", "\\Biggr", "\\bigg", "\\Bigg", "\\bigl", "\\bigr", "\\Bigl",
                 "\\Bigr", "\\big", "\\Big", "\\left", "\\right")
ASCII_PUNCTUATION = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\uff08": "(",
                                   "\uff09": ")", "\uff0c": ", ", "\uff1a": ": ", "\uff1b": "; ", "\u3002": ". ",
                                   "\uff01": "! ", "\uff1f": "? ", "\u2026": "...", "\u2013": "-", "\u2212": "-"})
CUT_AT = ("\\medskip", "\n---")
ROUNDING = 4  # decimals of number and set answers
VARIABLE_ROUNDING = 8  # decimals of a variable answer's values at the points
SOLVE_TIMEOUT_S = 30  # the official bound on solving one point (of a prediction; here of the reference too)
OFFICIAL_POINTS = {
    "5": [{"n": k} for k in range(1, 21)],
    "37": [{"a": k, "b": k + 1, "c": k + 2} for k in range(2, 19)],
}
UNKNOWN = "y"  # the variable the value of an expression at a point is solved for


def extract(output: str, answer_type: str) -> str:
    """The part of a response the official grader reads as its answer, normalised as it does."""
    text = (output or "").replace("\uff1a", ": ")
    for end in THINK_ENDS:
        text = text.split(end)[-1].strip()
    lowered = text.lower()
    marker = next((m for m in ANSWER_MARKERS if m in lowered), None)
    if marker is not None:
        tail = lowered.split(marker)[-1]
        # The official slices by the tail's length, so an empty tail keeps the whole text.
        text = (text[-len(tail):] if tail else text).strip()
    if answer_type != "description":
        for command in SIZE_COMMANDS:
            text = text.replace(command, "")
    text = text.translate(ASCII_PUNCTUATION)
    text = re.sub(r"\.+\}", "}", re.sub(r" +\}", "}", text))
    if answer_type in ("number", "variable", "set"):
        text = text.replace("\\,", "").replace("\\;", "").replace("\n", " ")
    if answer_type in ("number", "variable"):
        text = text.replace(",", "")
        for old, new in (("\\{", "("), ("\\}", ")"), ("\\[", "("), ("\\]", ")")):
            text = text.replace(old, new)
    return text.strip()


def cut(text: str) -> str:
    """The answer before the first \\medskip, then before the first line starting with ---."""
    for mark in CUT_AT:
        text = text.split(mark)[0].strip()
    return text


def rule_check(output: str, answer: str, answer_type: str, question_id: str) -> bool:
    """Whether a response's answer is right for a number, set or variable problem: the extracted
    answer, or the same cut, passes."""
    extracted = extract(output, answer_type)
    texts = list(dict.fromkeys((extracted, cut(extracted))))
    texts += ["\\boxed{" + t + "}" for t in texts if t and not any(m in t for m in ("\\boxed", "$", "\\("))]
    return any(_passes(text, answer, answer_type, question_id) for text in texts)


def _passes(text: str, answer: str, answer_type: str, question_id: str) -> bool:
    try:
        if answer_type == "variable":
            return variable_equal(text, answer, points_for(question_id, answer))
        return number_set_equal(text, answer)
    except Exception:
        return False


def _either_way(gold: list | Basic, pred: list | Basic, rounding: int) -> bool:
    from math_verify import verify

    return bool(verify(gold, pred, float_rounding=rounding) or verify(pred, gold, float_rounding=rounding))


def number_set_equal(text: str, answer: str) -> bool:
    from math_verify import parse

    pred, gold = parse(text), parse(answer)
    if _either_way(gold, pred, ROUNDING):
        return True
    if pred and "=" in pred[-1]:
        last = parse("\\boxed{" + pred[-1].split("=")[-1] + "}")
        return _either_way(gold, last, ROUNDING)
    return False


def points_for(question_id: str, answer: str) -> list[dict[str, int]]:
    """The official points of a problem; for another one, points of the same kind over the
    reference's variables: one variable at 1..20, several at consecutive integers from k = 2..18."""
    if str(question_id) in OFFICIAL_POINTS:
        return OFFICIAL_POINTS[str(question_id)]
    from math_verify import parse

    gold = parse(answer)
    names = sorted({str(s) for s in getattr(gold[0], "free_symbols", ())} - {UNKNOWN}) if gold else []
    if len(names) == 1:
        return [{names[0]: k} for k in range(1, 21)]
    return [{name: k + i for i, name in enumerate(names)} for k in range(2, 19)] if names else []


def _expression(parsed: list, split_quads: bool) -> str:
    """The LaTeX of a parsed answer's expression: before its last \\qquad, then \\quad, after its last `=`."""
    latex = parsed[-1]
    if split_quads:
        for quad in ("\\qquad", "\\quad"):
            if quad in latex:
                latex = latex.split(quad)[-2].strip()
    return latex.split("=")[-1]


def _value_at(point: dict[str, int], expression: str) -> Basic | None:
    """The value of `expression` at `point`, solved for UNKNOWN as the official grader does; None if
    there is no solution or no value for UNKNOWN in it."""
    from math_verify import parse

    assignment = ",".join(f"{name}={value}" for name, value in point.items())
    system = parse("\\boxed{" + assignment + f", {UNKNOWN}=" + expression + "}")[0]
    solution = _solve_within(system, SOLVE_TIMEOUT_S)
    if not solution:
        return None
    if isinstance(solution, list):
        solution = solution[0]
    if not isinstance(solution, dict):
        return None
    value = next((v for s, v in solution.items() if str(s) == UNKNOWN), None)
    return None if value is None else value.evalf()


def _solve_within(system: Basic, seconds: int) -> object:
    """sympy's solve, bounded by SIGALRM: the child process runs checks on its main thread."""
    import signal

    from sympy import solve

    def stop(signum: int, frame: FrameType | None) -> NoReturn:
        raise TimeoutError(f"solving took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return solve(system)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def variable_equal(text: str, answer: str, points: list[dict[str, int]]) -> bool:
    from math_verify import parse

    pred = parse(text)
    if not pred or not points:
        return False
    predicted, reference = _expression(pred, split_quads=True), _expression(parse(answer), split_quads=False)
    for point in points:
        mine, gold = _value_at(point, predicted), _value_at(point, reference)
        if mine is None or gold is None or not _either_way(gold, mine, VARIABLE_ROUNDING):
            return False
    return True
