"""Whether an answer equals the reference, mathematically: `math_equal` (IMO-AnswerBench, AMO-Bench).

It says "equal" only when it is sure: math-verify on answers it parsed whole, symbols case-sensitive,
decimals exact, answers in words compared word by word. Used by inside/answers.py's check_output; its
BoundedChild also runs AMO-Bench's checks (domains/amo_bounded.py). Answers are hostile input:
they are only read in passes of linear cost and handed to math-verify, whose parsing and comparing
are bounded by TIMEOUT_S on the main thread, and off it run in a child process that is killed past
CHILD_LIMIT_S; nothing is executed. math-verify (and sympy under it) is imported only where it is
used, so that this module, like the rest of inside/, loads on the standard library alone.
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
from fractions import Fraction

# It warns on every call made without a timeout (those off the main thread).
logging.getLogger("math_verify").setLevel(logging.ERROR)
TIMEOUT_S = 5  # seconds math-verify may spend parsing or comparing one answer
MAX_ANSWER_CHARS = 2_000  # a final answer longer than this is not parsed (math-verify's cost grows with it)
CHILD_LIMIT_S = 4 * TIMEOUT_S  # off the main thread: how long one check may take in the child process
CHILD_START_S = 120  # how long the child may take to start (imports sympy and math-verify)

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
    as math-verify would compare it rounded. A float is known by sympy's own flag, is_Float: sympy is
    math-verify's, never imported here."""
    try:
        return any(getattr(atom, "is_Float", False) for atom in expr.atoms())
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


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
