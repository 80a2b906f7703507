"""The SC-TIR baseline: code extraction and execution, answer voting, and whole candidates
scripted through the real fake server."""

import os
import re
import threading
import time
from pathlib import Path

import pytest

from task_agent.baselines import sc_tir
from task_agent.baselines.sc_tir import (
    OUTPUT_CAP,
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
def agent_with(provider, monkeypatch, tmp_path):
    """A TaskAgent whose candidates play `roles`, one candidate per role."""

    def make(roles: list[list], **constants):
        monkeypatch.setattr(sc_tir, "NUM_CANDIDATES", len(roles))
        for name, value in constants.items():
            monkeypatch.setattr(sc_tir, name, value)
        provider.set_responder(scripted(roles))
        return sc_tir.TaskAgent(model=MODEL, chat_history_file=str(tmp_path / "chat.md"))

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
    assert len(out) <= OUTPUT_CAP and out.endswith("printed more than 64 KB]")


def test_long_output_is_cut_to_the_cap_and_keeps_the_error():
    out = run_code("print('y' * 10000)\nraise ValueError('after the output')")
    assert len(out) <= OUTPUT_CAP
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
    assert body["temperature"] == sc_tir.TEMPERATURE and body["stop"] == ["```output"]
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
    agent = agent_with([[code("print('again')")]] * 2, MAX_DEPTH=2)
    prediction, history = agent.forward(INPUTS)
    assert prediction == "None"
    assert provider.count == 2 * (2 + 1)  # per candidate: MAX_DEPTH runs, each followed by a call
    outputs = [m["content"] for m in history if m["role"] == "user" and m["content"].startswith("```output")]
    assert len(outputs) == 2 * 2
    assert sum("You cannot run more code." in o for o in outputs) == 2
    assert (tmp_path / "chat.md").read_text().count("2 code runs, dropped") == 2


def test_code_timeout_applies_per_block(agent_with, provider):
    agent = agent_with([[code("import time\ntime.sleep(30)"), "The code was too slow; still, \\boxed{42}."]],
                       CODE_TIMEOUT_S=1)
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
