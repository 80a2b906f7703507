"""Final answers: what an output's answer is, and whether it is the reference.

Pure functions of text, used by the answer domains' metrics (imo_answer, aime2025, amo_bench) and by
the meta agent's try command. Model and agent output is hostile input: it is only read in passes of
linear cost; nothing is executed.

- AIME 2025: `aime_any_number` is the benchmark's own rule, `aime_strict` reads the last answer the
  output commits to only (their sources and rules are in their docstrings).
- IMO-AnswerBench and AMO-Bench: `check_output` compares an output's final answer with the reference
  by math_equality.math_equal (math-verify, made sure of what it calls equal, bounded in time).
  The IMO-Bench paper grades with an LLM instead; domains/judge.py has that grader.
"""

from __future__ import annotations

import re
from collections import deque
from fractions import Fraction

if __package__:  # the host's inside.answers
    from inside.math_equality import math_equal
else:  # run from this folder, as the try command imports it (see inside/__init__.py)
    from math_equality import math_equal

BARE_ANSWER_CHARS = 60  # an output this short, on one line, with no stated answer, is the answer itself

# -- what an output's answer is -------------------------------------------------------------------
# "The answer is 70", "Final answer: $70$", "**Final Answer:** 70" (bold markers are dropped first),
# "The answer is: 70"; a marker that ends its line states what the next line holds ("Final answer:\n70"),
# and so does a heading line that is just "Final Answer" or "Answer". The statement ends with its
# sentence, its line or an afterthought (", since ...").
_MARKER = re.compile(r"\banswer\s*(?:is\b\s*:?|:|=)|^[ \t#>]*(?:final[ \t]+)?answer[ \t]*:?[ \t]*$", re.I | re.M)
_STATEMENT_END = re.compile(r"\.(?:\s|$)|;|,\s*(?:as|since|because|which|where|so|thus|hence|by|from|that|this)\b",
                            re.I)
_DISPLAY = re.compile(r"\\\[|\$\$")
DISPLAY_CHARS = 300  # a display opened after a marker is its statement when it closes within this many characters


def _last_box(text: str) -> tuple[int, str] | None:
    """Where the last \\boxed{...} (or \\fbox{...}) of `text` starts and its content, braces balanced.
    One pass over the text, so that ten thousand unclosed boxes cost no more than reading them."""
    opens = {m.end() - 1: m.start() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)}
    stack: list[int] = []
    found = None  # (start of the content, its end) of the box opened last
    for m in re.finditer(r"[{}]", text):
        if m[0] == "{":
            stack.append(m.start())
        elif stack:
            start = stack.pop()
            if start in opens and (found is None or start > found[0]):
                found = (start + 1, m.start())
    return (opens[found[0] - 1], text[found[0]:found[1]].strip()) if found else None


def extract_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces balanced; None if none."""
    box = _last_box(text or "")
    return box[1] if box else None


def _last_statement(text: str) -> tuple[int, str] | None:
    """Where the last answer marker of `text` starts and what it states (see _MARKER), cut at the end
    of its sentence; a display (\\[...\\], $$...$$) that opens the statement is kept whole."""
    last = deque(_MARKER.finditer(text), maxlen=1)
    if not last:
        return None
    marker = last[0]
    rest = text[marker.end():].lstrip()
    display = _DISPLAY.match(rest)
    closer = {"\\[": "\\]", "$$": "$$"}[display[0]] if display else ""
    end = rest.find(closer, 2, DISPLAY_CHARS) if display else -1
    if end != -1:
        line = rest[end + 2:].split("\n", 1)[0]
        statement = " ".join(rest[:end + 2].split()) + line
    else:
        statement = rest.split("\n", 1)[0]
    return marker.start(), _STATEMENT_END.split(statement, maxsplit=1)[0].strip()


def _unbolded(text: str | None) -> str:
    return (text or "").replace("**", "").replace("__", "")


def final_answer(text: str) -> str | None:
    """The answer an output commits to: its last \\boxed{}, else the last "answer is ..." it states
    (up to the end of that sentence), else the output itself when it is one short line (an agent
    that returns just the answer)."""
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    stated = _last_statement(_unbolded(text))
    if stated:
        answer = stated[1].rstrip(".").strip()
        alone = re.fullmatch(r"\$([^$]+)\$", answer)  # "Answer: $70$" is 70
        return (alone[1].strip() if alone else answer) or None
    bare = (text or "").strip()
    return bare if bare and "\n" not in bare and len(bare) <= BARE_ANSWER_CHARS else None


# -- AIME 2025 ----------------------------------------------------------------------------------
# A number as the AIME rule reads it: 70, 70.0, 1,070 (also 1{,}070 and 1\,070: one number, not 1
# and 070), 140/2, and a minus sign written right before the digits (x-70 is 70, -70 is not);
# digits glued to a letter or an underscore (x70, 70a, a_70, 2nd) belong to that word.
_SEP = r"(?:,|\{,\}|\\,)"
_PLAIN = (r"(?:(?<![\w)\]}.])(?P<sign>[-\u2212]))?(?<![\w.])"
          rf"(?P<int>\d{{1,3}}(?:{_SEP}\d{{3}})+|\d+)(?P<dec>\.\d+)?"
          r"(?:\s*/\s*(?P<den>\d+)(?![\w.]))?(?![\w/]|\.\d)")
_LATEX_FRAC = (r"(?P<fsign>-\s*)?\\[dt]?frac\s*(?:\{\s*(?P<num>-?\d+)\s*\}|(?P<num1>\d))"
               r"\s*(?:\{\s*(?P<fden>\d+)\s*\}|(?P<fden1>\d))")
_AIME_NUMBER = re.compile(f"{_LATEX_FRAC}|{_PLAIN}")
_MOD_CLAUSE = re.compile(r"\s*\(?\s*(?:\\pmod\s*\{?\s*\d+\s*\}?|\\?(?:bmod|mod)\s*\{?\s*\d+\s*\}?)\s*\)?\s*$")
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")


def _value(m: re.Match) -> Fraction | None:
    """The value of one match of _AIME_NUMBER."""
    try:
        if m["num"] or m["num1"]:
            value = Fraction(int(m["num"] or m["num1"]), int(m["fden"] or m["fden1"]))
            return -value if m["fsign"] else value
        digits = re.sub(_SEP, "", m["int"]) + (m["dec"] or "")
        value = Fraction(digits) / (int(m["den"]) if m["den"] else 1)
        return -value if m["sign"] else value
    except ZeroDivisionError:
        return None


def aime_numbers(output: str) -> list[Fraction]:
    """Every number in `output`, in order, as the AIME benchmark's rule reads them (see aime_any_number)."""
    return [v for v in map(_value, _AIME_NUMBER.finditer(output or "")) if v is not None]


def as_integer(text: str | None) -> int | None:
    """The integer a final answer states: 42, 42.0, +42, 84/2, \\frac{84}{2}, 1,000, $42$, \\text{42},
    `m+n = 42`, `42 (mod 1000)`; None when it is anything else (two numbers, a non-integer, words)."""
    if text is None:
        return None
    cleaned = _WRAPPERS.sub(r"\1", str(text)).replace("$", "").replace("\\(", "").replace("\\)", "")
    cleaned = _MOD_CLAUSE.sub("", cleaned.strip().rstrip(".").strip())
    cleaned = cleaned.rsplit("=", 1)[-1].strip().lstrip("+").strip()
    while cleaned.startswith("{") and cleaned.endswith("}"):
        cleaned = cleaned[1:-1].strip()
    m = _AIME_NUMBER.fullmatch(cleaned)
    value = _value(m) if m else None
    return int(value) if value is not None and value.denominator == 1 else None


def aime_any_number(output: str, truth: str) -> bool:
    """The AIME 2025 benchmark's own rule: correct when any number in the output equals the answer.

    Source: jaimetcf/ai-benchmarks, benchmarks/aime2025/README.md ("Evaluation", "Answer Format":
    extract all numbers from the output, normalize them, check if any matches; "The sum is 70",
    "70.0" and "140/2" all count for 70) and its aime_benchmark.py (commit 230623fb): the same 30
    problems and answers, in the task format aime2025.jsonl follows. Where its regular expressions
    (which split 1,070 into 1 and 070, and take 70 out of -70) read otherwise than its
    stated rule, this reads the rule: a thousands separator does not split a number (1,070 is not
    70), \\frac{140}{2} is a fraction, and a minus sign written on the number counts (-70 is not 70).
    """
    want = as_integer(truth)
    return want is not None and any(v == want for v in aime_numbers(output))


def aime_strict(output: str, truth: str) -> bool:
    """The final-answer reading of AIME: right when the last answer the output commits to is the
    reference, as one integer. The rule:

    1. A commitment is a \\boxed{...} or \\fbox{...} (its content), or a marker: "answer is", "answer:",
       "answer =" ("The final answer is", "Final answer:"), or a line that is only "Final Answer" or
       "Answer". A marker commits to what follows it, up to the end of that sentence or line (the next
       line when the marker ends its own; a display \\[...\\] or $$...$$ that opens it, whole).
    2. The last commitment counts, whatever its kind: a later one overrides an earlier one ("The answer
       is 71. Wait, ... the answer is 70" is 70, and so is "\\boxed{71} ... the answer is 70"). Numbers
       written after it without a marker are not answers ("\\boxed{71}. Hmm, 70 fits too" is 71).
    3. An output without a commitment is its own answer only when it is one short line (at most
       BARE_ANSWER_CHARS characters): "70", "\\[70\\]", "**70**".
    4. What is committed to must be one integer, written as as_integer reads it (70, 70.0, 140/2,
       \\frac{140}{2}, m+n = 70, 70 (mod 1000), \\text{70}), inside any wrappers: math ($70$, $$70$$,
       \\(70\\), \\[70\\]), emphasis (*70*, **70**) or code (`70`); one word that only affirms may
       open it ("therefore 70", "indeed 70"; FILLERS), a hedging one may not ("probably 70").
    5. After it may come only a qualification that names other numbers as not the answer: "70 (not 71)",
       "70 and not 71", "70, not 71 or 72", "70 rather than 71". Anything else is no integer, and the
       output is wrong: a second number ("70 or 71", "70, 71"), a hedge ("70, or maybe 72"), a
       negation ("not 70"), words ("The answer is unclear"). An output that lists numbers without
       committing to one never scores.

    A departure from the benchmark's rule (aime_any_number), ours: an agent optimized against
    "any number counts" learns to list many numbers. AIME itself takes one integer per problem.
    """
    want = as_integer(truth)
    return want is not None and aime_answer(output) == want


def aime_answer(output: str) -> int | None:
    """The integer an output commits to, by aime_strict's rule; None when it commits to none."""
    text = _unbolded(output)
    commitments = [c for c in (_last_box(text), _last_statement(text)) if c]
    if commitments:
        return committed_integer(max(commitments)[1])
    bare = text.strip()
    return committed_integer(bare) if "\n" not in bare and len(bare) <= BARE_ANSWER_CHARS else None


# A number in a qualification that rules it out: 71, $71$, `71`, *71*, 1,071, 71.5.
_NAMED = r"[$`*]*-?\d+(?:[.,]\d+)*[$`*]*"
_NEGATED = re.compile(
    rf"(?P<head>.*?)\s*\(?\s*(?:[,;:]|--?|\u2013|\u2014)?\s*(?:(?:and|but)\s+)?(?:not|rather\s+than|instead\s+of)\s+"
    rf"{_NAMED}(?:\s*(?:,\s*(?:or|nor|and)?|or|nor|and)\s*{_NAMED})*\s*\)?\s*[.!]?", re.I | re.S)
FILLERS = ("therefore", "thus", "hence", "so", "indeed", "simply", "just", "exactly", "clearly")
_FILLER = re.compile(rf"(?:{'|'.join(FILLERS)})\b[\s,:]*", re.I)
_WRAPPED = re.compile(r"\*(.+)\*|`(.+)`|\$\$(.+)\$\$|\\\[(.+)\\\]|\\\((.+)\\\)|\$(.+)\$", re.S)
STATEMENT_CHARS = 200  # a committed answer longer than this is no integer (and no regex runs over a long one)


def committed_integer(answer: str) -> int | None:
    """The integer `answer` (a box's content, a statement or a short output) commits to: one integer
    in its wrappers, followed by nothing but a qualification naming numbers it is not (see aime_strict)."""
    answer = answer.strip()
    if len(answer) > STATEMENT_CHARS:
        return None
    negated = _NEGATED.fullmatch(answer)
    head = negated["head"] if negated else answer
    head = head[filler.end():] if (filler := _FILLER.match(head)) else head
    while wrapped := _WRAPPED.fullmatch(head.strip().rstrip(".").strip()):
        head = next(g for g in wrapped.groups() if g is not None)
    return as_integer(head)


# -- IMO-AnswerBench and AMO-Bench ------------------------------------------------------------------
def check_output(output: str, truth: str) -> bool:
    """An output's final answer against the reference, with math_equal."""
    return math_equal(final_answer(output) or (output or "").strip(), truth)
