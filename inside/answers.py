"""Checking final answers: what an output's answer is, and whether it equals the reference.

Pure functions of text, used by the answer domains' metrics (imo_answer, aime2025,
amo_bench). Equivalence is decided by `math-verify` (sympy-based: LaTeX, fractions,
sets, intervals, expressions), which parses a reference and a prediction and compares
them as mathematical objects, not as strings.
"""

from __future__ import annotations

import logging
import re
import threading
from fractions import Fraction

# It warns on every call made without a timeout (those off the main thread).
logging.getLogger("math_verify").setLevel(logging.ERROR)
TIMEOUT_S = 5  # seconds math-verify may spend parsing or comparing one answer
BARE_ANSWER_CHARS = 60  # an output this short, on one line, with no stated answer, is the answer itself

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w.])")
_STATED = re.compile(r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*\$?\s*([^\n$]+)", re.I)


def extract_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces balanced; None if none."""
    text = text or ""
    found = None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = text[m.end(): i - 1].strip()
    return found


def final_answer(text: str) -> str | None:
    """The answer an output commits to: its last \\boxed{}, else the last "answer is ..." it states,
    else the output itself when it is one short line (an agent that returns just the answer)."""
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    stated = _STATED.findall(text or "")
    if stated:
        return stated[-1].strip().rstrip(".").strip() or None
    bare = (text or "").strip()
    return bare if bare and "\n" not in bare and len(bare) <= BARE_ANSWER_CHARS else None


def as_integer(text: str | None) -> int | None:
    """An integer written as 42, 42.0, +42, 84/2 or with thousands separators; None otherwise."""
    if text is None:
        return None
    cleaned = text.strip().strip("$").replace(",", "").replace("\\,", "").replace(" ", "")
    cleaned = re.sub(r"^\\text\{(.*)\}$", r"\1", cleaned)
    try:
        if "/" in cleaned:
            num, den = cleaned.split("/", 1)
            value = Fraction(int(num), int(den))
        else:
            value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None
    return int(value) if value.denominator == 1 else None


def aime_any_number(output: str, truth: str) -> bool:
    """The AIME benchmark's rule: correct if any number in the output equals the answer."""
    want = as_integer(truth)
    return want is not None and any(as_integer(n) == want for n in _NUMBER.findall(output or ""))


def aime_strict(output: str, truth: str) -> bool:
    """Only the final \\boxed{} (or last stated answer) counts."""
    want = as_integer(truth)
    return want is not None and as_integer(final_answer(output)) == want


def math_equal(prediction: str | None, truth: str, float_rounding: int = 6) -> bool:
    """Whether `prediction` (an answer, not a whole output) equals `truth` mathematically."""
    if prediction is None or not str(prediction).strip():
        return False
    from math_verify import parse, verify

    # math-verify bounds its work with SIGALRM, which only the main thread may use.
    limit = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse(_as_latex(truth), parsing_timeout=limit)
        guess = parse(_as_latex(prediction), parsing_timeout=limit)
        if not gold or not guess:
            return _same_text(prediction, truth)
        return bool(verify(gold, guess, float_rounding=float_rounding, timeout_seconds=limit)) \
            or _same_text(prediction, truth)
    except Exception:
        return _same_text(prediction, truth)


def check_output(output: str, truth: str, float_rounding: int = 6) -> bool:
    """An output's final answer against the reference, with math-verify."""
    return math_equal(final_answer(output) or (output or "").strip(), truth, float_rounding)


def _as_latex(text: str) -> str:
    """math-verify reads LaTeX in math mode; a bare answer is put in it."""
    text = str(text).strip()
    return text if "$" in text or "\\(" in text or "\\[" in text else f"${text}$"


def _same_text(a: str, b: str) -> bool:
    def squash(s: str) -> str:
        return re.sub(r"\s+|\$|\\left|\\right|\\!|\\,", "", str(s)).lower()

    return squash(a) == squash(b)
