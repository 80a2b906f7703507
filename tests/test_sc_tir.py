"""The SC-TIR baseline: code extraction and execution, answer voting, and whole candidates
scripted through the real fake server, in our `light` preset and in the NuminaMath recipe's
(project-numina/aimo-progress-prize, kaggle-solution.ipynb)."""

import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from task_agent.baselines import sc_tir
from task_agent.baselines.sc_tir import (
    LIGHT,
    RECIPE,
    aimo_integer,
    aimo_vote,
    extract_boxed,
    extract_code,
    majority_vote,
    normalize_answer,
    run_code,
)

MODEL = "openai/fake"
INPUTS = {"domain": "aime2025", "problem": "What is six times seven?"}
_ROLE = re.compile(r"<!-- role (\d+) -->")
_OUTPUT = re.compile(r"```output\n(.*?)\n```", re.S)


def code(source: str, before: str = "Let me compute it.") -> str:
    return f"{before}\n```python\n{source}\n```"


def box_output(messages: list[dict]) -> str:
    """A reply that boxes whatever the last code run printed."""
    return f"The program says so: \\boxed{{{_OUTPUT.search(messages[-1]['content']).group(1)}}}"


def scripted(roles: list[list]):
    """A responder that gives the k-th candidate to call roles[k]: its replies, one per call
    (a string, or a function of the messages so far); the last one repeats.

    Candidates start concurrently on the same prompt, so each first reply carries a marker
    that later calls of the same conversation are recognised by.
    """
    lock, started = threading.Lock(), []

    def respond(body: dict) -> str:
        messages = body["messages"]
        if len(messages) == 1:
            with lock:
                role = len(started)
                started.append(role)
        else:
            role = int(_ROLE.search(messages[1]["content"]).group(1))
        replies = roles[role]
        reply = replies[min(len(messages) // 2, len(replies) - 1)]
        reply = reply(messages) if callable(reply) else reply
        return f"<!-- role {role} -->\n{reply}" if len(messages) == 1 else reply

    return respond


@pytest.fixture
def agent_with(provider, tmp_path):
    """A TaskAgent whose candidates play `roles`, one candidate per role, with `settings` (the
    light preset unless told) and the given fields changed."""

    def make(roles: list[list], settings=LIGHT, **fields):
        provider.set_responder(scripted(roles))
        chosen = replace(settings, candidates=len(roles), **fields)
        return sc_tir.TaskAgent(model=MODEL, chat_history_file=str(tmp_path / "chat.md"), settings=chosen)

    return make


def chat_requests(fake) -> list[list[dict]]:
    return [r["json"]["messages"] for r in fake.requests if r["json"]]


# -- pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("a\n```python\nprint(1)\n```\nb\n```python\nprint(2)\n```", "print(1)\n"),
    ("```py\nx = 1\n```", "x = 1\n"),
    ("```json\n{}\n```\n```python\nprint(3)\n```", "print(3)\n"),
    ('```python\ns = "```"\nprint(s)\n```', 's = "```"\nprint(s)\n'),  # a fence inside a string
    ("1. Compute:\n   ```python\n   for i in range(2):\n       print(i)\n   ```", "for i in range(2):\n    print(i)\n"),
    ("```python\nprint(1)", None),  # never closed: cut off
    ("no code at all", None),
    ("", None),
])
def test_extract_code(text, expected):
    assert extract_code(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\{1, \\{2\\}\\}} is the set", "\\{1, \\{2\\}\\}"),
    ("\\boxed{x^{2^{3}}+1}", "x^{2^{3}}+1"),
    ("draft \\boxed{3}, final \\boxed{4}", "4"),
    ("\\boxed{}", ""),
    ("draft \\boxed{3}, final \\boxed{4", None),  # a cut-off final answer does not let the draft win
    ("the answer is 42", None),
    ("", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text, expected", [
    (" 42 ", "42"),
    ("$42$", "42"),
    ("42.0", "42"),
    ("-7.000", "-7"),
    ("\\frac{84}{2}", "42"),
    ("-\\dfrac{6}{3}", "-2"),
    ("\\frac{-6}{3}", "-2"),
    ("84/2", "42"),
    ("7/2", "7/2"),
    ("\\frac{7}{2}", "\\frac{7}{2}"),
    ("1/0", "1/0"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("x \\leftarrow y", "x \\leftarrow y"),
    ("1\\,000", "1000"),
    ("n = 2k + 1", "n=2k+1"),
    ("\\text{no  solution}", "\\text{no solution}"),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("answers, expected", [
    (["7", "7", "7", "12", "12.0"], "7"),
    (["12", "7", "12.0", "7", "7"], "7"),
    (["5", "9", "9", "5"], "5"),  # a tie goes to the answer seen first
    (["9", "5", "5", "9"], "9"),
    (["$3$", "3.0", "\\frac{6}{2}", "4", "4"], "3"),
    (["", " ", "2"], "2"),  # empty answers do not vote
    (["", "$$"], None),
    ([], None),
])
def test_majority_vote(answers, expected):
    assert majority_vote(answers) == expected


# -- running code ------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a killed child nobody reaped yet is dead too


def test_run_code_returns_what_it_prints():
    assert run_code("print(6 * 7)") == "42"
    assert run_code("x = 1").startswith("[no output")


def test_run_code_keeps_the_end_of_a_traceback_only():
    out = run_code("print('before')\ndef f(n):\n    return f(n - 1) if n else 1 / 0\nf(5)")
    lines = out.splitlines()
    assert lines[0] == "before" and lines[-1] == "ZeroDivisionError: division by zero"
    assert len(lines) <= 1 + sc_tir.TRACEBACK_LINES
    assert "Traceback" not in out and "sc_tir_" not in out  # no call chain, no temporary folder


def test_run_code_runs_in_a_fresh_process_in_a_temporary_folder_without_secrets(monkeypatch):
    monkeypatch.setenv("AGENT_GATEWAY_KEY", "secret-key")
    out = run_code("import os, sys\nprint(os.getpid(), os.getcwd(), os.environ.get('AGENT_GATEWAY_KEY'))")
    pid, cwd, key = out.split()
    assert int(pid) != os.getpid() and "sc_tir_" in cwd and key == "None"
    assert not Path(cwd).exists()


def test_a_block_that_sleeps_past_the_timeout_is_stopped_with_its_children():
    source = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(child.pid)\ntime.sleep(60)")
    started = time.monotonic()
    out = run_code(source, timeout_s=1)
    assert time.monotonic() - started < 1 + 2
    assert "[stopped: the program ran longer than 1 s]" in out
    child = int(out.splitlines()[0])  # printed before the timeout, so kept
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_a_block_that_floods_stdout_is_stopped_and_its_output_capped():
    started = time.monotonic()
    out = run_code("while True:\n    print('x' * 1000)", timeout_s=10)
    assert time.monotonic() - started < 5  # stopped by the flood, not the timeout
    assert len(out) <= LIGHT.output_chars and out.endswith("printed more than 64 KB]")


def test_long_output_is_cut_to_the_cap_and_keeps_the_error():
    out = run_code("print('y' * 10000)\nraise ValueError('after the output')")
    assert len(out) <= LIGHT.output_chars
    assert out.startswith("yyy") and "[output cut: the program printed more than 4000 characters]" in out
    assert out.endswith("ValueError: after the output")


# -- whole candidates through the fake server --------------------------------------------------


def test_code_output_leads_to_the_boxed_answer(agent_with, provider, tmp_path):
    agent = agent_with([[code("print(6 * 7)"), box_output]])
    prediction, history = agent.forward(INPUTS)
    assert prediction == "42"
    assert provider.count == 2
    first, second = chat_requests(provider)
    assert len(first) == 1 and "What is six times seven?" in first[0]["content"]
    assert second[-1]["content"].startswith("```output\n42\n```\nContinue. You can run code 3 more times.")
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    body = provider.requests[0]["json"]
    assert body["temperature"] == 0.8 and body["stop"] == ["```output"] and "max_tokens" not in body
    transcript = (tmp_path / "chat.md").read_text()
    assert "# candidate 1: 1 code runs, answer 42" in transcript and "## prediction\n\n42" in transcript


def test_a_failing_block_returns_its_traceback_and_the_candidate_recovers(agent_with, provider):
    def fix(messages):
        assert "ZeroDivisionError: division by zero" in messages[-1]["content"]
        return code("print(6 * 7)", before="Division by zero; use multiplication.")

    agent = agent_with([[code("print(6 / 0)"), fix, box_output]])
    prediction, _ = agent.forward(INPUTS)
    assert prediction == "42" and provider.count == 3


def test_text_after_the_first_code_block_is_cut(agent_with, provider):
    # The fake server ignores `stop`, like a provider that does not support it: the model goes
    # on to invent an output and an answer, which must not count.
    invented = code("print(6 * 7)") + "\n```output\n41\n```\nSo \\boxed{41}.\n```python\nprint(0)\n```"
    agent = agent_with([[invented, box_output]])
    prediction, history = agent.forward(INPUTS)
    assert prediction == "42"
    assert history[1]["content"].endswith("```python\nprint(6 * 7)\n```")


def test_the_majority_of_survivors_wins_and_broken_candidates_are_dropped(agent_with, provider, tmp_path):
    roles = [
        [code("print(7)"), box_output],
        ["Clearly \\boxed{7}."],
        ["$\\boxed{7}$"],
        ["\\boxed{12}"],
        ["\\boxed{12.0}"],
        ["I could not finish."],  # never boxes
        ["\\boxed{}"],  # empty box
        ["\\boxed{12"],  # never closed
    ]
    prediction, history = agent_with(roles).forward(INPUTS)
    assert prediction == "7"
    assert provider.count == 9
    transcript = (tmp_path / "chat.md").read_text()
    assert transcript.count("answer 7\n") == 3 and transcript.count("answer 12\n") == 2
    assert transcript.count("dropped: no boxed answer") == 3


def test_broken_answers_do_not_vote(agent_with):
    # Counted, the empty boxes or the drafts before a cut-off final box would outvote the one good answer.
    roles = [["\\boxed{5}"], ["\\boxed{}"], ["\\boxed{ $ }"], ["draft \\boxed{9}, final \\boxed{9"],
             ["draft \\boxed{9}, final \\boxed{"]]
    assert agent_with(roles).forward(INPUTS)[0] == "5"


def test_a_tie_goes_to_the_answer_of_the_earliest_candidate(agent_with):
    roles = [["\\boxed{5}"], ["\\boxed{9}"], ["\\boxed{9}"], ["\\boxed{5}"]]
    prediction, history = agent_with(roles).forward(INPUTS)
    # Roles go to candidates in the order their first calls arrive; the history lists the
    # candidates in their own order, which is the order ties are broken in.
    answers = [extract_boxed(m["content"]) for m in history if m["role"] == "assistant"]
    assert sorted(answers) == ["5", "5", "9", "9"]
    assert prediction == answers[0]


def test_no_survivor_means_none(agent_with, provider):
    roles = [["no answer"], ["\\boxed{}"], ["\\boxed{3"], [code("print(1)"), "I give up."]]
    prediction, _ = agent_with(roles).forward(INPUTS)
    assert prediction == "None"
    assert provider.count == 5


def test_a_model_that_always_writes_code_stops_at_the_depth_limit(agent_with, provider, tmp_path):
    agent = agent_with([[code("print('again')")]] * 2, depth=3)
    prediction, history = agent.forward(INPUTS)
    assert prediction == "None"
    assert provider.count == 2 * 3  # per candidate: depth calls, all but the last followed by a run
    outputs = [m["content"] for m in history if m["role"] == "user" and m["content"].startswith("```output")]
    assert len(outputs) == 2 * 2
    assert sum("You cannot run more code." in o for o in outputs) == 2
    assert (tmp_path / "chat.md").read_text().count("2 code runs, dropped") == 2


def test_code_timeout_applies_per_block(agent_with, provider):
    agent = agent_with([[code("import time\ntime.sleep(30)"), "The code was too slow; still, \\boxed{42}."]],
                       code_timeout_s=1)
    started = time.monotonic()
    prediction, history = agent.forward(INPUTS)
    assert time.monotonic() - started < 1 + 2
    assert prediction == "42"
    assert "[stopped: the program ran longer than 1 s]" in history[2]["content"]


def test_a_failed_call_drops_one_candidate(agent_with, provider, tmp_path):
    provider.add_faults(["500"])
    prediction, _ = agent_with([["\\boxed{3}"]] * 3).forward(INPUTS)
    assert prediction == "3"
    assert (tmp_path / "chat.md").read_text().count("failed: ") == 1


def test_every_call_failing_is_an_error_not_an_empty_answer(agent_with, provider):
    provider.add_faults(["500"] * 3)
    with pytest.raises(RuntimeError, match="all 3 candidates failed"):
        agent_with([["\\boxed{3}"]] * 3).forward(INPUTS)


def test_other_domains_are_refused(agent_with, provider):
    with pytest.raises(ValueError, match="imo_answer, aime2025, amo_bench"):
        agent_with([["\\boxed{1}"]]).forward({"domain": "imo_proof", "problem": "Prove it."})
    assert provider.count == 0


# -- the recipe's preset -----------------------------------------------------------------------


def test_the_presets():
    assert (RECIPE.candidates, RECIPE.depth, RECIPE.temperature, RECIPE.max_tokens, RECIPE.code_timeout_s,
            RECIPE.output_chars, RECIPE.recipe_rules) == (48, 4, 0.8, 2048, 5, 200, True)
    assert (LIGHT.candidates, LIGHT.depth, LIGHT.max_tokens, LIGHT.recipe_rules) == (8, 5, None, False)
    assert sc_tir.PRESETS == {"recipe": RECIPE, "light": LIGHT}
    assert sc_tir.TaskAgent(MODEL).settings is sc_tir.PRESETS[sc_tir.PRESET]
    assert sc_tir.RecipeTaskAgent(MODEL).settings is RECIPE


def test_the_recipe_runs_48_traces_of_4_calls_and_restarts_those_without_code(provider, tmp_path):
    provider.set_responder(lambda body: "Without any code: \\boxed{7}")
    agent = sc_tir.RecipeTaskAgent(model=MODEL, chat_history_file=str(tmp_path / "chat.md"))
    prediction, _ = agent.forward(INPUTS)
    assert prediction == "0"  # no trace answered: the recipe's default
    bodies = [r["json"] for r in provider.requests if r["json"]]
    assert len(bodies) == 48 * 4
    assert all(len(b["messages"]) == 1 for b in bodies)  # every call started its trace over
    assert {(b["temperature"], b["max_tokens"], tuple(b["stop"])) for b in bodies} == {(0.8, 2048, ("```output",))}
    assert (tmp_path / "chat.md").read_text().count("dropped: no boxed answer, 4 restarts") == 48


@pytest.mark.parametrize("answer, kept", [
    ("42", 42), ("1042", 42), ("1,042", 42), ("$2042$", 42), ("0", 0), ("1000", 0),
    ("3.6", 4), ("2.5", 2),  # rounded (half to even, as Python's round), not dropped: the tolerance test is a no-op
    ("-3", None), ("-0.4", 0), ("\\frac{1}{2}", None), ("x + 1", None), ("", None), (None, None), ("1e400", None),
    ("45^\\circ", 45), ("12\\text{ cm}", 12), (": 17.", 17),
])
def test_the_recipe_filter(answer, kept):
    assert aimo_integer(answer) == kept


# (an answer dressed as traces write it, its light vote, what the recipe's filter keeps: mod 1000)
DRESSED = [
    pytest.param(r"70\,000", "70000", 0, id="latex-thin-space"),
    pytest.param("70\u2009000", "70000", 0, id="thin-space-character"),
    pytest.param("70\u202f000", "70000", 0, id="narrow-no-break-space"),
    pytest.param(r"70{,}000", "70000", 0, id="braced-comma"),
    pytest.param(r"\$70", "70", 70, id="escaped-dollar"), pytest.param(r"\$1070", "1070", 70, id="escaped-dollar-mod"),
    pytest.param(r"\overline{70}", "70", 70, id="overline"),
    pytest.param(r"\overline{1070}", "1070", 70, id="overline-mod"),
    pytest.param(r"\mathrm{70}", "70", 70, id="mathrm"), pytest.param(r"\text{70}", "70", 70, id="text"),
    pytest.param(r"\textbf{70}", "70", 70, id="textbf"),
    pytest.param(r"\mathrm{1{,}070}", "1070", 70, id="mathrm-groups"),
    pytest.param(r"$\text{\$70}$", "70", 70, id="nested"),
    pytest.param(r"\text{\overline{70}}", "70", 70, id="nested-overline"),
    pytest.param("+70", "70", 70, id="plus-sign"), pytest.param("070", "70", 70, id="leading-zero"),
    pytest.param("-07", "-7", None, id="negative-leading-zero"),
    # what is not a number stays itself
    pytest.param(r"0.\overline{3}", r"0.\overline{3}", None, id="repeating-decimal"),
    pytest.param(r"\overline{AB}", r"\overline{AB}", None, id="segment"),
    pytest.param(r"\text{no solution}", r"\text{no solution}", None, id="words"),
]


@pytest.mark.parametrize("answer, vote, kept", DRESSED)
def test_a_dressed_number_votes_as_the_number(answer, vote, kept):
    assert normalize_answer(answer) == vote
    assert aimo_integer(answer) == kept


def test_dressed_numbers_vote_together():
    assert majority_vote([r"\text{7}", "8", r"\$7", r"\overline{7}", "8"]) == "7"
    assert aimo_vote(["12", r"\$1070", r"\mathrm{70}", r"70\,000", "0"]) == "70"  # 70, 70, 70 beat 12 and 0, 0


@pytest.mark.parametrize("answers, expected", [
    (["-5", "1042", "42", "\\frac{1}{2}", "3.6", "2042.4"], "42"),
    (["5", "9", "9", "5"], "5"),  # a tie goes to the earliest
    ([None, "x", "-1"], "0"),  # nothing kept: 0
    ([], "0"),
])
def test_the_recipe_vote(answers, expected):
    assert aimo_vote(answers) == expected


def test_the_recipe_filters_the_answers_of_its_traces(agent_with, provider):
    roles = [[code("print(1)"), f"So the answer is \\boxed{{{a}}}."]
             for a in ("-5", "1042", "42", "\\frac{1}{2}", "3.6", "2042.4")]
    prediction, _ = agent_with(roles, settings=RECIPE).forward(INPUTS)
    assert prediction == "42"
    assert provider.count == 6 * 2


def test_the_recipe_votes_dressed_answers_of_its_traces_as_their_numbers(agent_with, provider):
    replies = ["So the answer is \\boxed{\\$1070}.", "So the answer is \\boxed{\\overline{70}}.",
               "So the answer is \\mathrm{70}.", "So the answer is \\boxed{12}.", "So the answer is \\boxed{12}."]
    prediction, _ = agent_with([[code("print(1)"), r] for r in replies], settings=RECIPE).forward(INPUTS)
    assert prediction == "70"


@pytest.fixture
def recipe_trace(provider, tmp_path):
    """A recipe agent with one trace, whose replies are `replies` in order; code runs get 30 s."""

    def make(replies: list[str]):
        left = list(replies)
        provider.set_responder(lambda body: left.pop(0))
        settings = replace(RECIPE, candidates=1, code_timeout_s=30)
        return sc_tir.TaskAgent(model=MODEL, chat_history_file=str(tmp_path / "chat.md"), settings=settings)

    return make


def sent(provider) -> list[list[dict]]:
    return [r["json"]["messages"] for r in provider.requests if r["json"]]


def test_a_trace_without_code_starts_over_and_the_call_is_spent(recipe_trace, provider, tmp_path):
    agent = recipe_trace(["It is \\boxed{5}.", code("print(6 * 7)"), "Thus the answer is 42."])
    assert agent.forward(INPUTS)[0] == "42"  # "answer is" counts like a box
    assert [len(m) for m in sent(provider)] == [1, 1, 3]
    assert sent(provider)[2][-1]["content"] == "```output\n42\n```"  # the output alone, as the recipe appends it
    assert "1 code runs, answer 42., 1 restarts" in (tmp_path / "chat.md").read_text()


def test_an_answer_before_any_code_ran_is_dropped(recipe_trace, provider):
    # A code block, and an answer right after it without waiting for the output: made up.
    agent = recipe_trace([code("print(6 * 7)") + "\nIt prints 41, so \\boxed{41}."])
    assert agent.forward(INPUTS)[0] == "0"
    assert provider.count == 1


def test_a_call_that_neither_waits_nor_answers_starts_over(recipe_trace, provider):
    agent = recipe_trace([code("print(1)"), "Let me think about it more.", code("print(6 * 7)"), "So \\boxed{42}"])
    assert agent.forward(INPUTS)[0] == "42"
    assert [len(m) for m in sent(provider)] == [1, 3, 1, 3]


def test_only_the_last_100_characters_hold_the_answer(recipe_trace, provider):
    late = "So \\boxed{42}. " + "And now a long aside that has no answer in it at all. " * 3
    agent = recipe_trace([code("print(6 * 7)"), late, code("print(6 * 7)"), "So \\boxed{42}"])
    assert agent.forward(INPUTS)[0] == "42"
    assert [len(m) for m in sent(provider)] == [1, 3, 1, 3]  # the late answer was not seen: a restart


def test_the_last_call_ends_a_trace_that_still_writes_code(recipe_trace, provider):
    agent = recipe_trace([code("print(1)")] * 4)
    assert agent.forward(INPUTS)[0] == "0"
    assert [len(m) for m in sent(provider)] == [1, 3, 5, 7]  # 4 calls, 3 runs


def test_the_recipe_runs_the_last_block_and_ignores_an_invented_output(recipe_trace, provider):
    invented = code("print(1)") + "\n" + code("print(6 * 7)") + "\n```output\n41\n```\nSo \\boxed{41}."
    agent = recipe_trace([invented, "So \\boxed{42}"])
    assert agent.forward(INPUTS)[0] == "42"
    second = sent(provider)[1]
    assert second[1]["content"].endswith("print(6 * 7)\n```\n") and second[2]["content"] == "```output\n42\n```"


def test_the_recipe_code_rules():
    # The prelude's imports, and a last line without print( printed without its comment.
    assert run_code("x = np.arange(4).sum() + len(sp.factorint(12)) + math.factorial(3)\nx  # the sum",
                    timeout_s=30, recipe=True) == "14"
    assert run_code("print('x' * 500)", timeout_s=30, cap=200, recipe=True) == "x" * 200 + " ... (output truncated)"
    failed = run_code("print('before')\ndef f():\n    return 1 / 0\nf()", timeout_s=30, cap=1000, recipe=True)
    lines = failed.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-1] == "ZeroDivisionError: division by zero"
    # 3 lines of prelude first, and the last line printed
    assert '  File "solution.py", line 7, in <module>' in lines and "    print(f())" in lines
    assert "before" not in failed  # a failed program shows its traceback only
    assert run_code("import time\ntime.sleep(30)", timeout_s=1, recipe=True) == \
        "[stopped: the program ran longer than 1 s]"
