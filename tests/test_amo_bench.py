"""AMO-Bench grading as the official grader does it (github.com/meituan-longcat/AMO-Bench,
grading.py and utils.py): answer extraction, the cut retry, math-verify both ways, variables at
the official integer points, judge verdicts read as there; rule checks bounded in a child
process; judges called through the real gateway on the fake provider."""

import threading
import time

import pytest

from domains import amo_bench
from domains.amo_bounded import BoundedChecker
from domains.amo_grading import OFFICIAL_POINTS, extract, points_for
from domains.judge import GatewayJudge

DESCRIPTION = {"question_id": "4", "prompt": "Who wins the game?", "answer": r"\boxed{\text{Bob wins when n is odd}}",
               "answer_type": "description"}
DESCRIPTION_ANSWER = "Some thoughts </think> So: ### The final answer is: Bob wins for odd n"


def row(answer: str, answer_type: str = "number", question_id: str = "1") -> dict:
    return {"question_id": question_id, "prompt": "A problem.", "answer": answer, "answer_type": answer_type}


# -- extraction ---------------------------------------------------------------------------------
@pytest.mark.parametrize("output, answer_type, expected", [
    (r"<think>\boxed{7}</think> ### The final answer is: \boxed{5}", "number", r"\boxed{5}"),
    (r"a </think> b </longcat_think> c", "number", "c"),
    # the last occurrence of the first marker found, matched without case
    (r"Final answer: 3. ### THE FINAL ANSWER IS: \boxed{4}", "number", r"\boxed{4}"),
    (r"the final answer is 3, final answer: 4", "number", "4"),
    # a marker at the very end leaves the whole text, as the official slicing does
    (r"\boxed{2} ### The final answer is:", "number", r"\boxed{2} ### The final answer is:"),
    ("final answer\uff1a\\left( 1\uff0c2 \\right)", "set", "( 1, 2 )"),
    (r"final answer: \{1, 2\}", "number", "(1 2)"),  # commas go and \{ \} read as parentheses
    (r"final answer: \{1, 2\}", "set", r"\{1, 2\}"),
    ("final answer: 1\\,000\n---\nnote", "number", "1000 --- note"),  # lines joined: no cut at ---
    ("final answer: \\left(Bob .}\n---\nnote", "description", "\\left(Bob }\n---\nnote"),
])
def test_the_answer_is_extracted_as_the_official_grader_does(output, answer_type, expected):
    assert extract(output, answer_type) == expected


# -- rule checks --------------------------------------------------------------------------------
@pytest.mark.parametrize("output, answer, expected", [
    (r"<think>maybe \boxed{7}</think> ### The final answer is: \boxed{5}", r"\boxed{5}", True),
    (r"<think>maybe \boxed{7}</think> ### The final answer is: \boxed{5}", r"\boxed{7}", False),
    (r"<longcat_think>\boxed{7}</longcat_think>\boxed{5}", r"\boxed{5}", True),
    (r"<think>so \boxed{7}</think> I could not finish.", r"\boxed{7}", False),  # reasoning is not the answer
    (r"We get \boxed{3}. ### The final answer is: \boxed{4}", r"\boxed{4}", True),
    (r"### The final answer is: \boxed{12} \medskip A check: \boxed{13}", r"\boxed{12}", True),  # the cut retry
    ("\\boxed{12}\n---\n\\boxed{13}", r"\boxed{12}", False),  # --- never cuts: lines were joined first
    (r"\boxed{3.14159}", r"\boxed{3.1416}", True),  # 4 decimals
    (r"\boxed{3.1415}", r"\boxed{3.1416}", False),
    (r"\boxed{x = 3.1416}", r"\boxed{3.1416}", True),  # what follows the last = is tried too
    (r"\boxed{1,382,935,444}", r"\boxed{1382935444}", True),
    ("42", r"\boxed{42}", True),  # an agent's bare answer
    ("", r"\boxed{42}", False),
])
def test_number_answers(output, answer, expected):
    assert amo_bench.check(output, row(answer)) is expected


def test_set_answers_are_verified_both_ways():
    from math_verify import parse, verify

    for gold, pred in ((r"\boxed{(1, 2)}", r"\boxed{\{2, 1\}}"), (r"\boxed{[1, \infty)}", r"\boxed{x \ge 1}")):
        assert not verify(parse(gold), parse(pred)) and verify(parse(pred), parse(gold))
        assert amo_bench.check(pred, row(gold, "set"))
    assert amo_bench.check(r"\boxed{\{3, 2, 1\}}", row(r"\boxed{\{1, 2, 3\}}", "set"))
    assert not amo_bench.check(r"\boxed{\{1, 2\}}", row(r"\boxed{\{1, 2, 3\}}", "set"))


def test_the_official_points_of_the_variable_problems():
    assert OFFICIAL_POINTS["5"] == [{"n": k} for k in range(1, 21)]
    assert OFFICIAL_POINTS["37"] == [{"a": k, "b": k + 1, "c": k + 2} for k in range(2, 19)]
    assert points_for("9", r"\boxed{x^2 + 2x + 1}") == [{"x": k} for k in range(1, 21)]


VANISHING_ON_1_TO_20 = "".join(f"(n-{k})" for k in range(1, 21))


@pytest.mark.parametrize("question_id, answer, output, expected", [
    # equal on the integers, not on the rationals the check used to substitute
    ("5", r"\boxed{(-1)^n}", r"\boxed{\cos(\pi n)}", True),
    ("5", r"\boxed{n - 2\lfloor n/2 \rfloor}", r"\boxed{\frac{1-(-1)^n}{2}}", True),
    ("5", r"\boxed{n - 2\lfloor n/2 \rfloor}", r"\boxed{\frac{n}{2}}", False),
    ("5", r"\boxed{\binom{n+1}{2}}", r"\boxed{\frac{n(n+1)}{2}}", True),
    ("5", r"\boxed{\binom{n+1}{2}}", "n(n+1)/2", True),  # bare, as an agent answers
    ("5", r"\boxed{\binom{n+1}{2}}", r"\boxed{a_n = \frac{n(n+1)}{2} \qquad (n \ge 1)}", True),
    # exactly the points n = 1..20: a difference that vanishes there passes, one at n = 20 does not
    ("5", r"\boxed{n}", r"\boxed{n + " + VANISHING_ON_1_TO_20 + "}", True),
    ("5", r"\boxed{n}", r"\boxed{n + " + VANISHING_ON_1_TO_20.replace("(n-20)", "") + "}", False),
    # values compared at 8 decimals
    ("5", r"\boxed{n}", "n + 10^{-10}", True),
    ("5", r"\boxed{n}", "n + 10^{-6}", False),
    ("37", r"\boxed{a+b+c}", r"\boxed{c+b+a+" + "".join(f"(a-{k})" for k in range(2, 19)) + "}", True),
    ("37", r"\boxed{a+b+c}", r"\boxed{a+b}", False),
    ("9", r"\boxed{x^2 + 2x + 1}", "(x+1)^2", True),  # a problem without official points
    ("9", r"\boxed{x^2 + 2x + 1}", "(x-1)^2", False),
])
def test_variable_answers_are_compared_at_the_official_integer_points(question_id, answer, output, expected):
    assert amo_bench.check(output, row(answer, "variable", question_id)) is expected


@pytest.mark.e2e
def test_a_check_that_takes_too_long_is_stopped_and_the_next_one_runs_off_the_main_thread():
    checker = BoundedChecker(limit_s=2)
    try:
        assert checker("1", r"\boxed{1}", "number", "1")  # the child is up
        started = time.monotonic()
        assert checker(r"\boxed{9^{9^{9^{9}}}}", r"\boxed{3}", "number", "1") is False
        assert time.monotonic() - started < 2 + 1
        results = []
        worker = threading.Thread(target=lambda: results.append(checker(r"\boxed{0.5}", r"\boxed{\frac{1}{2}}",
                                                                         "number", "1")))
        worker.start()
        worker.join(60)
        assert results == [True]
    finally:
        checker.close()


# -- judges -------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply, vote", [
    ("### Conclusion: Correct", True),
    ("Both say Bob wins for odd n.\n### Conclusion: correct", True),
    ("### Conclusion: Incorrect", False),
    ("It is not correct", False),
    ("The student's answer isn't correct", False),
    ("### Conclusion: not correct", False),
    ("At first it looks correct.\n### Conclusion: Incorrect", False),  # only the last conclusion counts
    ("Conclusion: Incorrect. Conclusion: Correct", True),
    ("### Conclusion: Correct.", False),  # "correct." is not the word "correct", as in the official
    ("### Conclusion: **Correct**", False),
    ("", False),
])
def test_verdicts_are_read_as_the_official_grader_reads_them(reply, vote):
    assert amo_bench.verdict(reply) is vote


@pytest.fixture
def judge(gateway_factory, fake_openai):
    """A GatewayJudge on a real gateway whose judge model is the fake provider's; `script(replies)`
    gives the judges' replies in order."""
    gw = gateway_factory()
    gw.config.models.judge = "openai/fake-judge"
    lock, replies = threading.Lock(), []

    def respond(body: dict) -> str:
        with lock:
            return replies.pop(0)

    def script(new: list[str]) -> None:
        replies[:] = new
        fake_openai.set_responder(respond)

    judge = GatewayJudge(gw.config, gateway=gw, node="n")
    judge.script = script
    return judge


def test_negated_verdicts_are_no_votes_through_the_gateway(judge, fake_openai):
    judge.script(["It is not correct", "It isn't correct", "### Conclusion: Incorrect",
                  "### Conclusion: Correct", "### Conclusion: Correct"])
    assert amo_bench.check(DESCRIPTION_ANSWER, DESCRIPTION, judge) is False
    bodies = [r["json"] for r in fake_openai.requests if r["json"]]
    assert len(bodies) == 5 and {b["model"] for b in bodies} == {"fake-judge"}
    assert {b["temperature"] for b in bodies} == {1.0}


def test_three_correct_verdicts_of_five_pass(judge, fake_openai):
    judge.script(["### Conclusion: Correct"] * 3 + ["### Conclusion: Incorrect"] * 2)
    assert amo_bench.check(DESCRIPTION_ANSWER, DESCRIPTION, judge) is True
    prompt = fake_openai.requests[-1]["json"]["messages"][-1]["content"]
    assert "### Problem\nWho wins the game?\n" in prompt
    assert "### Reference Answer\n\\boxed{\\text{Bob wins when n is odd}}\n" in prompt  # as the dataset writes it
    assert "### Student Answer\nBob wins for odd n\n" in prompt  # after </think> and the final-answer marker
    assert "Some thoughts" not in prompt and "### Conclusion: Correct/Incorrect" in prompt


def test_an_empty_answer_is_wrong_without_asking_the_judges(judge, fake_openai):
    judge.script([])
    assert amo_bench.check("Thinking... </think>  ", DESCRIPTION, judge) is False
    assert fake_openai.count == 0


def test_a_failed_judge_call_stops_the_scoring(judge, fake_openai):
    judge.script(["### Conclusion: Correct"] * 5)
    fake_openai.add_faults(["500"] * 6)  # the first call and the gateway's 5 retries
    with pytest.raises(Exception):  # noqa: B017 - whatever the failed call raises, scoring must stop
        amo_bench.check(DESCRIPTION_ANSWER, DESCRIPTION, judge)


def test_a_long_judge_prompt_keeps_its_two_ends():
    prompt = amo_bench.judge_prompt("A problem.", r"\boxed{1}", "x" * 30000)
    assert len(prompt) == 10000 + len("\n\n...\n\n") + 10000
    assert prompt.startswith("You check answers") and prompt.endswith("four decimal places or more.")
    assert "\n\n...\n\n" in prompt
