"""inside/answers.py and inside/math_equality.py against the cases of issues 26 and 36: AIME 2025's two
rules (the benchmark's "any number" and the strict final answer), and IMO-AnswerBench's rule check
(math-verify, made sure of what it calls equal) on right and near-miss answers written for real rows
of the data set."""

import random
import re
import threading
import time

import pytest

from domains.judge import AnswerGrader
from inside import math_equality
from inside.answers import (
    aime_answer,
    aime_any_number,
    aime_numbers,
    aime_strict,
    as_integer,
    check_output,
    committed_integer,
    extract_boxed,
    final_answer,
)
from inside.math_equality import in_words, math_equal
from support.answer_cases import RIGHT, WRONG, references, truth


# -- AIME: the benchmark's rule ---------------------------------------------------------------------
@pytest.mark.parametrize("output", [
    "The sum is 70", "70.0", "140/2",  # the examples of the benchmark's README
    "The answer is 70.", r"\frac{140}{2}", r"$\dfrac{140}{2}$", r"\tfrac{140}{2}", r"\frac{140} {2}", "70.00",
    "x = 70", "(70)", "70%", "x-70 = 0 gives 70", "We get 1,070 - 1,000 = 70, done.", r"\boxed{070}",
    "Seventy? 7, then 70!", "b = 70;", "the 2 bases are 21 and 49, so 21+49=70",
])
def test_any_number_counts_every_way_of_writing_70(output):
    assert aime_any_number(output, "70")


@pytest.mark.parametrize("output", [
    "1,070", "1{,}070", r"1\,070", "70,000",  # one number each, with its thousands separators
    "-70", "$-70$", "= -70", r"-\frac{140}{2}",  # a minus sign on the number
    "x70", "70a", "a_70", "v70 is", "70th", "7070", "0.70", "70.5", "700", "1.70", "140/3",
    "no numbers here", "",
])
def test_any_number_does_not_count_numbers_that_are_not_70(output):
    assert not aime_any_number(output, "70")


def test_numbers_are_read_in_order_with_their_values():
    assert [str(v) for v in aime_numbers(r"1,070 and -3, then \frac{1}{2}, 7.5 and 9/3; x2 y_4 5-2")] == \
        ["1070", "-3", "1/2", "15/2", "3", "5", "2"]
    assert aime_numbers("1/0 and 2") == [2]  # a fraction over zero is no number


# -- AIME: the strict final answer ---------------------------------------------------------------------
@pytest.mark.parametrize("output", [
    "**Final Answer:** 70", "The answer is: 70", "70 (mod 1000)", r"\boxed{070}", r"$\boxed{70}$.", "Answer: $70$",
    "The answer is 70.", r"so $m+n = \boxed{70}$", r"The final answer is $\boxed{70}$", "Final answer: 70",
    "**Final Answer**: 70", r"The answer is $70 \pmod{1000}$.", "The answer is 70. It checks out.",
    "The answer is 70, since 7 * 10 = 70.", r"\boxed{\text{70}}", r"Answer: \(70\)", "70",
    "I first got 71.\nThe answer is 70",
])
def test_strict_reads_the_answer_the_output_commits_to(output):
    assert aime_strict(output, "70")


@pytest.mark.parametrize("output", [
    "At first I got 70. The answer is 71.", r"70 fits? No. \boxed{71}", "Answer: 70 or 71",
    r"\boxed{70} ... oops, \boxed{17}", "70, 71", "The answer is 1,070", "The answer is -70", r"\boxed{70.5}",
    "It is 70 I think, but I am not sure at all, so many numbers could be right here: 70, 71, 72", "",
    r"\boxed{70, 71}", "The answer is 70 or 71.",
])
def test_strict_rejects_another_final_answer_or_a_hedge(output):
    assert not aime_strict(output, "70")


@pytest.mark.parametrize("output", [
    pytest.param(r"\boxed{70}", id="boxed"), pytest.param(r"\fbox{70}", id="fbox"),
    pytest.param(r"\[70\]", id="display-brackets"), pytest.param("$$70$$", id="display-dollars"),
    pytest.param("$70$", id="inline-dollars"), pytest.param(r"\(70\)", id="inline-parens"),
    pytest.param("*70*", id="emphasis"), pytest.param("**70**", id="bold"), pytest.param("`70`", id="code"),
    pytest.param("The answer is **70**.", id="answer-is-bold"), pytest.param("Answer: `70`", id="answer-code"),
    pytest.param("Final answer: *70*", id="final-answer-emphasis"),
    pytest.param("The answer is\n\\[\n70\n\\]", id="answer-is-then-display"),
    pytest.param("Some work.\n\n**Final Answer**\n\n\\[70\\]", id="final-answer-heading"),
    pytest.param("Final answer:\n\n70", id="final-answer-next-line"),
    pytest.param("70 and not 71", id="and-not"), pytest.param("Final answer: 70 (not 71)", id="parenthesised-not"),
    pytest.param("The answer is 70, not 71 or 72.", id="not-a-list"),
    pytest.param("Answer: $70$ (not $71$)", id="not-in-math"),
    pytest.param("Answer: 70 rather than 71", id="rather-than"),
    pytest.param("The answer is therefore 70.", id="affirming-word"),
    pytest.param("The answer is 71. Wait, I dropped a case, so the answer is 70", id="self-correction-one-line"),
    pytest.param("The answer is 71.\nWait: recounting, the answer is 70.", id="self-correction-next-line"),
    pytest.param(r"\boxed{71}. Wait, that double counts; the answer is 70.", id="self-correction-after-box"),
    pytest.param(r"So the final answer is $\boxed{70}$. I hope it is correct.", id="box-inside-statement"),
])
def test_strict_reads_the_last_committed_answer_in_each_form(output):
    assert aime_strict(output, "70")


@pytest.mark.parametrize("output", [
    pytest.param("70, 71, 72", id="list"), pytest.param("Candidates: **70**, **71**, **72**", id="bold-list"),
    pytest.param("\\[70\\]\n\\[71\\]", id="two-displays"), pytest.param("*70* or *71*", id="emphasised-hedge"),
    pytest.param("`70` `71`", id="two-codes"), pytest.param("$70$ and $71$", id="two-maths"),
    pytest.param("Answer: 70 and 71", id="answer-two-numbers"), pytest.param("The answer is 70 (or 71)", id="or-aside"),
    pytest.param("The answer is not 70.", id="negated"),
    pytest.param("The answer is 70. Hmm, no: the answer is not 70.", id="retracted"),
    pytest.param("The answer is 70. Wait, actually the answer is 71.", id="corrected-away"),
    pytest.param(r"\boxed{70}" "\nThe answer is 71", id="box-then-other-statement"),
    pytest.param(r"\boxed{71}. Hmm, 70 might also work.", id="box-then-musing"),
    pytest.param("The answer is 71. Checking: 7 * 10 = 70, and 70 is even.", id="numbers-after-the-marker"),
    pytest.param("Answer: 71\n70", id="bare-line-after-the-answer"),
    pytest.param("Final answer: 71 (not 70)", id="the-negated-one"),
    pytest.param("Final answer: 70, not 71, or maybe 72", id="hedge-after-the-qualification"),
    pytest.param("The answer is 70 (not 71) or 72", id="number-after-the-qualification"),
    pytest.param("Final answer: not 71 but 70", id="negation-first"),
    pytest.param("We tried 70.\n\n**Final Answer**\n\n71", id="heading-with-another"),
    pytest.param(r"\boxed{70}. Answer: unclear, maybe 71", id="box-then-words"),
    pytest.param("The answer is probably 71, though 70 is close.", id="hedged-statement"),
    pytest.param("The answer is probably 70", id="hedging-word"),
])
def test_strict_scores_no_answer_the_output_did_not_commit_to(output):
    assert not aime_strict(output, "70")


@pytest.mark.parametrize("text, value", [("42", 42), ("42.0", 42), ("84/2", 42), ("042", 42), ("1,000", 1000),
                                         ("$70$", 70), (r"\frac{140}{2}", 70), ("m+n = 70", 70), ("70 (mod 1000)", 70),
                                         (r"\text{70}", 70), ("+42", 42), ("4.5", None), ("x", None),
                                         ("1/0", None), ("1,0", None), ("70 71", None), (None, None)])
def test_aime_integers_are_normalised(text, value):
    assert as_integer(text) == value


@pytest.mark.parametrize("text, value", [("70 (not 71)", 70), ("$70$ and not $71$", 70), ("**70**", 70),
                                         ("x" * 300, None), ("70 " + "not 71, " * 100, None), ("not 70", None)])
def test_a_committed_answer_is_one_integer_and_what_it_is_not(text, value):
    assert committed_integer(text) == value


def test_the_aime_answer_is_the_last_commitment_or_none():
    assert aime_answer(r"\boxed{12} at first; the answer is 42") == 42
    assert aime_answer(r"the answer is 12, then \boxed{42}") == 42
    assert aime_answer("12 or 42") is None and aime_answer("") is None and aime_answer(None) is None


def test_the_aime_rule_counts_any_number_but_strict_only_the_final_answer():
    hedging = r"It could be 12, or maybe 84/2, or 7. I will go with \boxed{12}."
    assert aime_any_number(hedging, "42") and not aime_strict(hedging, "42")
    assert aime_strict(r"\boxed{42}", "42") and aime_strict("The answer is 42.0", "42")


# -- final answers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("output, answer", [
    ("Long reasoning...\nSo the final answer is 17.", "17"),
    ("The answer is: 1/2", "1/2"),
    ("**Final Answer:** $x \\le 0$", "x \\le 0"),
    ("The answer is $\\frac{1}{2}$, as shown above.", "\\frac{1}{2}"),
    ("The answer is odd $n$.", "odd $n$"),
    ("The answer is $2$ or $3$.", "$2$ or $3$"),  # a hedge stays a hedge
    ("The answer is 3. No, the answer is $x \\le 0$.", "x \\le 0"),  # the last statement, on one line too
    ("Work.\n\n**Final Answer**\n\nodd $n$", "odd $n$"),  # a heading states the line after it
    ("17", "17"),
    ("line one\nline two", None),
])
def test_the_final_answer_of_an_output(output, answer):
    assert final_answer(output) == answer


# -- IMO-AnswerBench by rule -----------------------------------------------------------------------------
@pytest.mark.parametrize("row, prediction", RIGHT)
def test_right_answers_written_otherwise_are_accepted(row, prediction):
    assert check_output(prediction, truth(row)), (prediction, truth(row))


@pytest.mark.parametrize("row, prediction", WRONG)
def test_near_misses_are_rejected(row, prediction):
    assert not check_output(prediction, truth(row)), (prediction, truth(row))


def test_the_named_cases_of_the_issue():
    assert not math_equal("r - 2R", "$R-2r$")  # math-verify alone lower-cases symbols
    assert not math_equal("even $n$", "odd $n$") and not math_equal("even n", "odd $n$")
    assert math_equal(r"x \le 0", r"$(-\infty , 0]$")
    assert check_output("The answer is: 1/2", r"$\frac{1}{2}$")


@pytest.mark.parametrize("prediction, truth_", [
    (r"\frac{1}{2}", "0.5"), (r"\{2, 1\}", r"\{1, 2\}"), (r"(0, 1]", r"(0,1]"), (r"1 + n^2", r"n^2+1"),
    (r"2\sqrt{2}", r"\sqrt{8}"), ("42", "42"), (r"\dfrac{3}{4}", r"\frac{3}{4}"), ("x = 3", "3"),
    ("f(x) = x + 1", "f(x)=x+1"), ("P(x) = 2x^2 + c", "$P(x)=2x^{2}+c$"),
])
def test_equivalent_forms_match(prediction, truth_):
    assert math_equal(prediction, truth_)


@pytest.mark.parametrize("prediction, truth_", [
    ("3", "4"), (r"[0, 1]", r"(0, 1]"), (r"\{1, 2\}", r"\{1, 2, 3\}"), (r"n^2 - 1", r"n^2 + 1"), ("", "4"),
    (None, "4"), ("I could not solve it", "4"), (r"\frac{1}{", "0.5"),
    ("$3a^2 - b^2 = 3$", "3"),  # an equation is not the value of its right side
    ("2 or 3", "2"), ("$2$ or $3$", "2"), ("2; 3", "2"), (r"x=2 \text{ or } x=3", "2"), ("x=2, y=3", "2"),
    (r"1, 2, \ldots, 9", r"1, 2, 9"),  # math-verify would drop the ellipsis
    (r"$a^2 - a + 1$ ( $a \ge 2$)", r"a^2 - a + 1"),  # read whole or not at all
    ("A", "a"),  # symbols keep their case
    ("1" * 3000, "1" * 3000),  # too long to parse
])
def test_near_misses_and_malformed_answers_do_not_match(prediction, truth_):
    assert not math_equal(prediction, truth_)


# -- IMO-AnswerBench: decimals are exact, symbols are read ------------------------------------------------
# (row, an answer equal to its reference): exact decimals, repeating decimals, radicals, pi, symbol characters
EXACT = [
    ("algebra-070", "0.25"), ("geometry-032", "7/4"), ("geometry-032", "1.750"), ("number_theory-051", r"\frac{13}{2}"),
    ("geometry-017", r"\frac{2}{4}"), ("combinatorics-047", "0.09375"), ("combinatorics-095", "0.96"),
    ("geometry-035", "3.5"), ("algebra-072", r"x \ge -1.2"),
    ("geometry-086", r"0.\overline{3}"), ("algebra-088", r"0.\overline{142857}"), ("geometry-019", r"1.\overline{3}"),
    ("geometry-075", r"\frac{\sqrt{21}}{7}"), ("geometry-075", "√(3/7)"), ("geometry-075", r"\sqrt{3}/\sqrt{7}"),
    ("geometry-022", "√2"), ("geometry-022", "2^{0.5}"), ("algebra-043", "√2 − 1"), ("geometry-005", r"1+\sqrt{2}"),
    ("geometry-089", r"\frac{96}{13}\sqrt{10}"), ("geometry-082", r"\sqrt{2.5}"),
    ("geometry-087", r"\frac{3\sqrt{15}}{10}"), ("geometry-056", r"\frac{\sqrt{510}\,\pi}{3}"),
    ("geometry-056", "√510·π/3"), ("geometry-049", "πl + 2π"), ("geometry-049", "pi(l+2)"),
    ("algebra-017", r"(-∞, 0) ∪ \{0.5\}"), ("algebra-096", "4·3^{2023}"), ("number_theory-052", r"65\,537"),
]
# (row, a decimal that only rounds to its reference, or is no number)
ROUNDED = [
    ("geometry-075", "0.654654"), ("geometry-075", "0.6547"), ("geometry-075", "0.65465367"),
    ("geometry-022", "1.414214"), ("geometry-022", "1.41421356237"), ("algebra-043", "0.414214"),
    ("geometry-005", "2.414214"), ("geometry-056", "23.649050"), ("geometry-033", "0.974279"),
    ("geometry-011", "4.791288"), ("algebra-009", "4.940841"), ("geometry-049", "3.141593(l+2)"),
    ("geometry-086", "0.333333"), ("geometry-086", "0.3333333333"), ("algebra-071", "0.666667"),
    ("algebra-088", "0.142857"), ("geometry-019", "1.333333"), ("geometry-091", "0.916667"),
    ("algebra-010", "-0.666667, 0, 0.666667"), ("algebra-086", "(0, 0.444444]"), ("geometry-032", "1.7500001"),
    ("geometry-087", "1.161895"), ("geometry-075", r"approximately $0.654654$"), ("geometry-086", "0.(3)"),
]


@pytest.mark.parametrize("row, prediction", EXACT)
def test_an_equal_form_is_accepted(row, prediction):
    assert check_output(prediction, truth(row)), (prediction, truth(row))


@pytest.mark.parametrize("row, prediction", ROUNDED)
def test_a_rounded_decimal_is_never_accepted(row, prediction):
    assert not check_output(prediction, truth(row)), (prediction, truth(row))


@pytest.mark.parametrize("prediction, truth_, equal", [
    ("2.718282", "e", False), ("3.141593", r"\pi", False), ("0.785398", r"\frac{\pi}{4}", False),
    (r"\{1.414214\}", r"\{\sqrt{2}\}", False), ("0.3333333", "0.333333", False), ("1e-3", "0.001", False),
    (r"\frac{1}{4}", "0.25", True), ("0.5", r"50\%", True), (r"\varnothing", r"\emptyset", True),
    (r"1.5\pi", r"\frac{3\pi}{2}", True), (r"0.5\sqrt{2}", r"\frac{\sqrt{2}}{2}", True), ("e^{0.5}", r"\sqrt{e}", True),
    ("1,234.5", "2469/2", True),  # digit groups, as math-verify reads 1,234
])
def test_decimals_compare_exactly_beside_pi_e_sets_and_percents(prediction, truth_, equal):
    assert math_equal(prediction, truth_) is equal


def test_the_hybrid_grader_is_never_sure_of_a_rounded_decimal():
    """imo_answer_hybrid settles by rule only what math_equal is sure of: a rounded decimal goes to the grader."""
    prompts = []
    grader = AnswerGrader("Short Answer", "Problem", rule_first=True)
    row = {"Short Answer": truth("geometry-075"), "Problem": "P"}
    verdicts = grader.grade([r"\boxed{0.654654}", r"\boxed{\frac{\sqrt{21}}{7}}"], [row, row],
                            judge=lambda prompt: prompts.append(prompt) or r"\boxed{Incorrect}")
    assert [tuple(v) for v in verdicts] == [(False, "judge"), (True, "rule")]
    assert len(prompts) == 1 and "0.654654" in prompts[0]


@pytest.mark.parametrize("answer, words", [
    ("odd $n$", True), ("n is prime", True), ("All powers of 2", True), ("no solutions", True),
    (r"$g(x)=\frac{1}{3}((2x)^a)$ for some $a>0$", True), (r"$T = 0 if p = 0$", True), (r"\text{even}", True),
    (r"$\frac{R^2+Rr}{\sqrt{R^2-2Rr}}$", False), (r"$\lfloor \log_{2}a\rfloor +1$", False), ("xy(x-y)^2", False),
    (r"$\frac{3}{2}(XZ-XY)$", False), (r"\mathbb{Z}", False), (r"$$x \le 0$$", False),
])
def test_answers_in_words_are_told_from_products_of_symbols(answer, words):
    assert in_words(answer) is words


def _number(answer: str):
    """The value of an answer that is one number (0.5, $\\frac{1}{2}$), else None."""
    values = aime_numbers(answer)
    plain = not re.search(r"[A-Za-z]", re.sub(r"\\[dt]?frac", "", answer))
    return values[0] if len(values) == 1 and plain else None


@pytest.mark.e2e
def test_every_reference_equals_itself_and_none_of_a_sample_of_others():
    """Each of the 400 references equals itself, and none of 2 others drawn at random (the whole cross
    product costs minutes), unless both are the same number."""
    golds = list(dict.fromkeys(g.strip() for g in references().values()))
    assert all(math_equal(g, g) for g in golds)
    rng = random.Random(26)
    pairs = [(a, b) for a in golds for b in rng.sample(golds, 2) if a != b]
    accepted = [(a, b) for a, b in pairs if math_equal(a, b)]
    assert all(_number(a) is not None and _number(a) == _number(b) for a, b in accepted), accepted


# -- off the main thread -----------------------------------------------------------------------------
def _on_a_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    return out[0]


@pytest.mark.e2e
def test_off_the_main_thread_checks_run_bounded_in_a_child(monkeypatch):
    """The loop scores on threads, where math-verify has no time limit: there a child process checks,
    and one that takes too long is killed (not equal), then a new one takes the next check."""
    assert _on_a_thread(lambda: math_equal(r"x \le 0", r"$(-\infty , 0]$"))
    assert not _on_a_thread(lambda: math_equal("r - 2R", "$R-2r$"))
    started = time.monotonic()
    assert not _on_a_thread(lambda: math_equal("9^{9^{9^{9}}}", "1"))  # on a thread of its own, this never ends
    assert time.monotonic() - started < math_equality.CHILD_LIMIT_S + 5
    monkeypatch.setattr(math_equality, "CHILD_LIMIT_S", 0.2)
    child = math_equality._BOUNDED._proc
    assert not _on_a_thread(lambda: math_equal("9^{9^{9^{9}}}", "1"))
    assert math_equality._BOUNDED._proc is None and child.poll() is not None  # killed
    monkeypatch.setattr(math_equality, "CHILD_LIMIT_S", 20)
    assert _on_a_thread(lambda: math_equal("1/2", "0.5"))


# -- hostile outputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, boxed", [
    (r"first \boxed{1}, then \boxed{\frac{a}{\{b\}}}", r"\frac{a}{\{b\}}"), (r"\boxed{unclosed", None),
    (r"\boxed{a} \boxed{b", "a"), (r"}} \boxed{ x{y} } {", "x{y}"), (r"\boxed{\boxed{3}}", "3"), (r"\boxed {4}", "4"),
    (r"\fbox{5}", "5"), ("", None), (None, None),
])
def test_the_last_balanced_box(text, boxed):
    assert extract_boxed(text) == boxed


@pytest.mark.e2e
@pytest.mark.parametrize("output", ["\\boxed{" * 100_000, "\\boxed{1}" * 100_000, "1" * 1_000_000 + "a",
                                    "-" * 1_000_000 + "70", "1/" * 500_000, "answer: " * 100_000, "$" * 1_000_000,
                                    "\\frac{1}{2" * 100_000, "odd " * 200_000])
def test_a_megabyte_of_hostile_output_is_read_in_linear_time(output):
    started = time.monotonic()
    aime_any_number(output, "70"), aime_strict(output, "70"), check_output(output, "70")
    assert time.monotonic() - started < 10  # each takes well under a second here; quadratic would take hours
