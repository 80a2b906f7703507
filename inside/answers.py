"""Checking final answers: what an output's answer is, and whether it equals the reference.

Pure functions of text, used by the answer domains' metrics (imo_answer, aime2025,
amo_bench) and by the meta agent's try command. Model and agent output is hostile input:
it is only read in passes of linear cost and handed to math-verify, whose parsing and comparing
are bounded by TIMEOUT_S on the main thread, and off it run in a child process that is killed
past CHILD_LIMIT_S; nothing is executed.

- AIME 2025: `aime_any_number` is the benchmark's own rule, `aime_strict` reads the last answer the
  output commits to only (their sources and rules are in their docstrings).
- IMO-AnswerBench and AMO-Bench: `math_equal` says "equal" only when it is sure (math-verify
  on answers it parsed whole, symbols case-sensitive, decimals exact, answers in words compared
  word by word).
  The IMO-Bench paper grades with an LLM instead; domains/judge.py has that grader.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from fractions import Fraction

# It warns on every call made without a timeout (those off the main thread).
logging.getLogger("math_verify").setLevel(logging.ERROR)
TIMEOUT_S = 5  # seconds math-verify may spend parsing or comparing one answer
BARE_ANSWER_CHARS = 60  # an output this short, on one line, with no stated answer, is the answer itself
MAX_ANSWER_CHARS = 2_000  # a final answer longer than this is not parsed (math-verify's cost grows with it)
CHILD_LIMIT_S = 4 * TIMEOUT_S  # off the main thread: how long one check may take in the child process
CHILD_START_S = 120  # how long the child may take to start (imports sympy and math-verify)

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


# -- mathematical equality (IMO-AnswerBench, AMO-Bench) ----------------------------------------------
# Words that make an answer one in words even inside math ("$n$ odd", "0 if ..., else 1"); besides
# these, any run of 4 or more letters that is not a function's name. Shorter runs in math are products
# of variables (ab, xy, Rr, pqr).
_SHORT_WORDS = {"if", "or", "and", "for", "all", "is", "are", "no", "not", "of", "the", "odd", "any"}
_FUNCTIONS = {"sinh", "cosh", "tanh", "arcsin", "arccos", "arctan", "sqrt", "frac", "floor", "ceil"}
_PROSE_WRAPPER = re.compile(r"\\(?:text\w*|mbox)\s*\{([^{}]*)\}")
_COMMAND_WITH_ARGUMENT = re.compile(r"\\(?:math\w*|operatorname|begin|end)\s*\{[^{}]*\}")
_CASED = re.compile(r"\\(?:text\w*|math\w*|operatorname|mbox|begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+|([A-Z])")


def _is_word(run: str, in_math: bool) -> bool:
    if not in_math:
        return len(run) >= 2
    return run.lower() in _SHORT_WORDS or (len(run) >= 4 and run.lower() not in _FUNCTIONS)


def in_words(answer: str) -> bool:
    """Whether an answer is (partly) in words: "odd $n$", "n is prime", "$x$ for some real $a$"."""
    if any(re.search(r"[A-Za-z]{2,}", t) for t in _PROSE_WRAPPER.findall(answer)):
        return True
    text = _COMMAND_WITH_ARGUMENT.sub(" ", _PROSE_WRAPPER.sub(" ", answer))
    text = re.sub(r"\\[A-Za-z]+", " ", re.sub(r"\$\$|\\[()\[\]]", "$", text))
    pieces = text.split("$") if "$" in text else ["", text]
    return any(_is_word(run, in_math=i % 2 == 1) for i, piece in enumerate(pieces)
               for run in re.findall(r"[A-Za-z]+", piece))


def _tokens(answer: str) -> list[str]:
    """An answer as a list of tokens that do not depend on its typesetting: words lower-cased,
    symbols kept as written (R is not r), spacing, $, \\left/\\right and \\text{} dropped."""
    text = _PROSE_WRAPPER.sub(r" \1 ", answer)
    text = re.sub(r"\\(?:mathrm|operatorname)\s*\{([^{}]*)\}", r" \1 ", text)
    text = re.sub(r"\\(?:left|right|displaystyle)(?![A-Za-z])|\\[,;:! ]|\\q?quad(?![A-Za-z])|\$|\\[()\[\]]", " ", text)
    text = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", text)
    text = re.sub(r"\\(le|ge|ne)q(?![A-Za-z])", r"\\\1", text)
    text = re.sub(r"([_^])\{([^{}])\}", r"\1\2", text).strip().rstrip(".").strip()
    return [t.lower() if t.isalpha() and _is_word(t, in_math=True) else t
            for t in re.findall(r"\\[A-Za-z]+|[A-Za-z]+|\d+(?:\.\d+)?|\S", text)]


def _cased(latex: str) -> str:
    """`latex` with each capital letter that is a symbol (not in a command or its argument) renamed
    to a name of its own: latex2sympy lower-cases symbols, which made R - 2r equal r - 2R."""
    return _CASED.sub(lambda m: f"\\variable{{upper{m[1]}}}" if m[1] else m[0], latex)


_NOT_READ = re.compile(r"\\(?:[lcvd]?dots|underbrace|overbrace)(?![A-Za-z])|\.\.\.")
_MATH_DELIMITER = re.compile(r"\$\$?|\\[()\[\]]")


def _squashed(latex: str) -> str:
    return re.sub(r"\s+|\\left|\\right|\\[!,;]|\\displaystyle|\.$", "", latex)


def _math_text(answer: str) -> str | None:
    """An answer as one piece of LaTeX math, its $...$ joined; None when text other than commas
    stands between or around its math ("$a$ ( $a \\ge 2$), 0 ($a=1$)"), or it has an ellipsis,
    which math-verify drops (1, 2, \\ldots, 9 would read as {1, 2, 9})."""
    if _NOT_READ.search(answer):
        return None
    pieces = _MATH_DELIMITER.split(answer)
    if len(pieces) == 1:
        return answer.strip().rstrip(".")
    if any(re.search(r"[^\s,.;]", outside) for outside in pieces[0::2]):
        return None
    return ", ".join(p.strip() for p in pieces[1::2] if p.strip()).rstrip(".")


# Symbols written as characters, which math-verify does not read (2√2, π/4, 3·2^{10}), in LaTeX.
_SYMBOLS = {"π": r"\pi ", "∞": r"\infty ", "·": r"\cdot ", "×": r"\times ", "−": "-", "≤": r"\le ", "≥": r"\ge ",
            "≠": r"\ne ", "∅": r"\emptyset ", "∪": r"\cup ", "∩": r"\cap ", "∈": r"\in "}
_ROOT = re.compile(r"√\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d+|[A-Za-z]))")
_REPEATING = re.compile(r"(?<![\d.])(\d+)\.(\d*)\\overline\s*\{(\d+)\}")
_DECIMAL = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+)?\.(\d+)(?![\d.])")  # 1,234.5 as math-verify reads 1,234


def _as_latex(text: str) -> str:
    """`text` with what math-verify misreads written as it reads it: symbol characters and the word pi
    as LaTeX, \\varnothing as \\emptyset, and digit groups joined (1\\,000 is 1000, not 1 times 000)."""
    text = _ROOT.sub(lambda m: rf"\sqrt{{{next(g for g in m.groups() if g is not None)}}}", text)
    text = re.sub("|".join(_SYMBOLS), lambda m: _SYMBOLS[m[0]], text)
    text = re.sub(r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi ", text)
    text = re.sub(r"\\varnothing(?![A-Za-z])", r"\\emptyset", text)
    return re.sub(r"(?<=\d)(?:\\[,;!]|\{,\}|~)(?=\d{3}(?!\d))", "", text)


def _latex_fraction(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else rf"\frac{{{value.numerator}}}{{{value.denominator}}}"


def _exact_decimals(text: str) -> str:
    """`text` with each decimal written as the fraction it is exactly (0.25 as \\frac{1}{4}, 0.\\overline{3}
    as \\frac{1}{3}), so that math-verify compares it exactly: it compares a float with anything rounded
    to 6 places, which took 0.654654 for \\sqrt{3/7} and 0.333333 for 1/3."""
    def repeating(m: re.Match) -> str:
        whole, fixed, period = m[1], m[2], m[3]
        value = Fraction(int(whole + fixed + period) - int(whole + fixed), 10 ** len(fixed) * (10 ** len(period) - 1))
        return _latex_fraction(value)

    text = _REPEATING.sub(repeating, text)
    return _DECIMAL.sub(lambda m: _latex_fraction(Fraction(f"{(m[1] or '0').replace(',', '')}.{m[2]}")), text)


def _has_float(expr) -> bool:
    """Whether math-verify's reading holds a float (1e-3, say, or one it made itself): never compared,
    as math-verify would compare it rounded."""
    from sympy import Float

    try:
        return bool(expr.atoms(Float))
    except Exception:
        return True


def _parse_whole(answer: str, limit: int):
    """math-verify's reading of an answer, or None unless it read all of it as mathematics."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse
    from math_verify.parser import NormalizationConfig, normalize_latex

    text = _math_text(answer)
    if not text:
        return None
    # units=False: IMO answers have no units, and with units on, "2x^2 + c" loses its "c" (centi-).
    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all",
                               equations=False)
    text = _cased(_exact_decimals(_as_latex(text)))
    parsed = parse(f"${text}$", extraction_config=[LatexExtractionConfig(normalization_config=norm),
                                                  ExprExtractionConfig()], parsing_timeout=limit)
    if len(parsed) != 2 or isinstance(parsed[0], str) or _has_float(parsed[0]):
        return None
    if _squashed(parsed[1]) != _squashed(normalize_latex(text, norm)):
        return None  # math-verify read a part of it only (a number it found in LaTeX it could not parse)
    return parsed


def _names_its_value(guess: str, gold: str) -> bool:
    """False for an equation given for a value (3a^2 - b^2 = 3 for 3), which math-verify would read as
    its right side; true for an assignment (x = 3, f(x) = x + 1) or when the reference is an equation too."""
    if "=" not in guess or "=" in gold:
        return True
    left = guess.split("=", 1)[0].strip().strip("$").strip()
    return re.fullmatch(r"[A-Za-z](?:_\{?\w+\}?)?(?:\([^()=]*\))?", left) is not None


def math_equal(prediction: str | None, truth: str) -> bool:
    """Whether `prediction` (an answer, not a whole output) surely equals `truth`; False when unsure.

    By math-verify (huggingface/Math-Verify: sympy-based, LaTeX, fractions, sets, intervals,
    expressions), made stricter: both answers must be read whole, symbols keep their case (R - 2r is
    not r - 2R), an inequality equals its interval (x \\le 0 is (-\\infty, 0]), and a decimal is the
    fraction it is exactly (0.25 is 1/4 and 0.\\overline{3} is 1/3; 0.333333 is not 1/3, nor 0.654654
    \\sqrt{3/7}: math-verify alone compares decimals rounded to 6 places). Symbols written as characters
    (2√2, π/4, 3·2^{10}) are read as LaTeX. Answers in words are equal only when their words and
    symbols are ("even $n$" is not "odd $n$").
    """
    if prediction is None or not str(prediction).strip():
        return False
    guess, gold = str(prediction).strip(), str(truth).strip()
    if max(len(guess), len(gold)) > MAX_ANSWER_CHARS:
        return False
    same_tokens = _tokens(guess) == _tokens(gold)
    if same_tokens or in_words(guess) or in_words(gold) or not _names_its_value(guess, gold):
        return same_tokens
    if threading.current_thread() is not threading.main_thread():
        # math-verify bounds its work with SIGALRM, which only a main thread may use: the child's.
        return _BOUNDED.ask(json.dumps([guess, gold]), CHILD_LIMIT_S) == "true"
    return _verified(guess, gold)


def _verified(guess: str, gold: str) -> bool:
    """math-verify's verdict on two answers it read whole; on the main thread (its time limits)."""
    from math_verify import verify

    try:
        want, got = _parse_whole(gold, TIMEOUT_S), _parse_whole(guess, TIMEOUT_S)
        return want is not None and got is not None and bool(
            verify(want, got, timeout_seconds=TIMEOUT_S, allow_set_relation_comp=True))
    except Exception:
        return False


class BoundedChild:
    """A long-lived child process that answers each request line with one line, checking on its main
    thread (where math-verify's time limits work), and is killed with its process group and replaced
    when an answer takes longer than the limit (sympy busy in C on 9^{9^{9^9}}). Its first line
    must be "ready", within `start_s`. Used for this module's checks off the main thread and for
    AMO-Bench's (domains/amo_bounded.py)."""

    def __init__(self, argv: list[str], start_s: float, what: str, env: dict | None = None, cwd: str | None = None):
        self.argv, self.start_s, self.what, self.env, self.cwd = argv, start_s, what, env, cwd
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def ask(self, request: str, limit_s: float) -> str | None:
        """The child's line in answer to `request` (one line), or None when none came within `limit_s`
        or the child died (it is then replaced for the next request)."""
        with self._lock:
            proc = self._child()
            assert proc.stdin, "the child's stdin is a pipe"
            try:
                proc.stdin.write((request + "\n").encode())
                proc.stdin.flush()
                reply = _read_line(proc, time.monotonic() + limit_s)
            except OSError:
                reply = None
            if reply is None:
                self._stop()
            return reply

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _child(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        self._proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        if _read_line(self._proc, time.monotonic() + self.start_s) != "ready":
            self._stop()  # an infrastructure failure, not the answer's: raised, never scored as wrong
            raise RuntimeError(f"{self.what} did not start within {self.start_s:g} s")
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe:
                pipe.close()


def _read_line(proc: subprocess.Popen, deadline: float) -> str | None:
    """One line from the child's stdout by `deadline`, without its newline; None if none came."""
    data, stdout = b"", proc.stdout
    assert stdout, "the child's stdout is a pipe"
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stdout], [], [], left)[0]:
            return None
        chunk = os.read(stdout.fileno(), 4096)
        if not chunk:
            return None
        data += chunk
    return data.decode(errors="replace").strip()


def _serve() -> None:
    """The child's loop (see BoundedChild), until its stdin closes."""
    from math_verify import verify  # noqa: F401 (imported before "ready": the first check is not slower)

    print("ready", flush=True)
    for line in sys.stdin:
        guess, gold = json.loads(line)
        print(json.dumps(_verified(str(guess), str(gold))), flush=True)


_BOUNDED = BoundedChild([sys.executable, os.path.abspath(__file__), "--serve"], CHILD_START_S,
                        "the answer-check process")
atexit.register(_BOUNDED.close)


def check_output(output: str, truth: str) -> bool:
    """An output's final answer against the reference, with math_equal."""
    return math_equal(final_answer(output) or (output or "").strip(), truth)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
