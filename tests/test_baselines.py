"""The baseline task agents, with litellm talking to the real fake server."""

import re
import time

import pytest

from task_agent.baselines import proof_solver, proofautograder
from task_agent.baselines.proof_solver import MAX_CALLS, extract_proof, parse_verdict
from task_agent.baselines.proofautograder import parse_points, points_to_label

MODEL = "openai/fake"
GRADING_INPUTS = {"domain": "imo_grading", "problem": "PROBLEM-TEXT", "solution": "REFERENCE-TEXT",
                  "grading_guidelines": "GUIDELINES-TEXT", "student_answer": "STUDENT-TEXT"}
PROOF_INPUTS = {"domain": "imo_proof", "problem": "Prove that 1 + 1 = 2."}


def prompts(fake) -> list[str]:
    return [r["json"]["messages"][0]["content"] for r in fake.requests if r["json"]]


# -- ProofAutoGrader: parsing ------------------------------------------------------------------


def reference_label(text: str) -> str:
    """The HyperAgents reference's reading (baselines/imo_grading/proofautograder.py), written out
    as the oracle: the first points block by a lazy dot-all regex, its first digit run, four values."""
    block = re.search(r"<points>(.*?)</points>", text, re.DOTALL)
    digits = re.search(r"\d+", block.group(1)) if block else None
    try:
        return {0: "incorrect", 1: "partial", 6: "almost", 7: "correct"}.get(int(digits.group()), "None")
    except (AttributeError, ValueError):
        return "None"


# Every reply the earlier tests used, and the cases where the reference's reading is not the obvious one.
REPLIES = [
    ("Checked.\n<points>6 out of 7</points>", "almost"),
    ("<points>0 out of 7</points>", "incorrect"),
    ("Step 1 is fine.\n<points>7 out of 7</points>", "correct"),
    ("Only the first lemma.\n<points>1 out of 7</points>", "partial"),
    # the first block counts, not the last
    ("<points>1 out of 7</points> then <points>7 out of 7</points>", "partial"),
    ("<points>7 out of 7</points> on reflection <points>1 out of 7</points>", "correct"),
    ("<points>5 out of 7</points> final: <points>8 out of 7</points>", "None"),
    ("<points>out of</points> <points>7 out of 7</points>", "None"),  # a first block without digits
    ("<points>draft <points>6 out of 7</points>", "almost"),  # the block runs to the first closing tag
    # 2 to 5 are not on the reference's scale
    ("<points>2 out of 7</points>", "None"),
    ("<points>3 out of 7</points>", "None"),
    ("<points>4 out of 7</points>", "None"),
    ("<points>5 out of 7</points>", "None"),
    ("<points>8 out of 7</points>", "None"),
    ("<points>9 out of 7</points>", "None"),
    # the first digit run inside the block, whatever surrounds it
    ("<points>-1 out of 7</points>", "partial"),
    ("<points>six out of 7</points>", "correct"),
    ("<points>5.5 out of 7</points>", "None"),
    ("<points>5 out of 10</points>", "None"),
    ("<points>07 out of 7</points>", "correct"),
    ("<points>6/7</points>", "almost"),
    ("<points>Score: 1</points>", "partial"),
    ("<points>\u0667 out of 7</points>", "correct"),  # an Arabic-Indic seven is a digit to \d
    # whitespace anywhere, newlines included; tag names only in lower case
    ("<points>\n3\nout of\n7\n</points>", "None"),
    ("<points>  6\n out of 7 </points>", "almost"),
    ("<points>\n\n0\n</points>", "incorrect"),
    ("<POINTS>  7   OUT OF 7 </Points>", "None"),
    ("<Points>6 out of 7</Points>", "None"),
    ("<points>6 out of 7</POINTS>", "None"),
    ("<points >6 out of 7</points>", "None"),
    # no block at all
    ("The solution deserves 7 out of 7.", "None"),
    ("I would give it six points.", "None"),
    ("", "None"),
    ("<points>5 out of 7", "None"),
    ('{"points": 6}', "None"),  # JSON counts only for a model under constrained decoding (below)
    ("<points>" + "0" * 5000 + "7</points>", "None"),  # too many digits for int(): the reference fails too
]


@pytest.mark.parametrize("text, label", REPLIES)
def test_replies_are_read_as_the_reference_reads_them(text, label):
    assert reference_label(text) == label  # the table itself is the reference's reading
    assert (points_to_label(parse_points(text)) or "None") == label


@pytest.mark.parametrize("points, label", [
    (0, "incorrect"), (1, "partial"), (6, "almost"), (7, "correct"),
    (2, None), (3, None), (4, None), (5, None), (8, None), (-1, None), (None, None),
])
def test_points_to_label(points, label):
    assert points_to_label(points) == label


@pytest.mark.parametrize("text, points", [
    ('{"points": 6}', 6),
    ('{"points": 0}', 0),
    ('{"points": 5}', 5),  # read, then invalid like a 5 in a tag
    ('{"points": "6"}', None),
    ('{"points": true}', None),
    ('{"score": 6}', None),
    ('[6]', None),
    ("not json", None),
    ("<points>7 out of 7</points>", 7),
    ('{"points": 0, "why": "<points>7 out of 7</points>"}', 7),  # a points block: the reference's reading
    ('{"points": 6, "why": "<points>none</points>"}', None),
])
def test_a_constrained_model_is_read_by_its_json_only_without_a_points_block(text, points):
    assert parse_points(text, constrained=True) == points


def test_reading_is_linear_in_the_reply():
    # A lazy regex search retries from every opening tag: quadratic on this reply; the reading is not.
    hostile = "<points>" * 200_000 + " 7"
    started = time.monotonic()
    assert parse_points(hostile) is None and parse_points(hostile + "</points>") == 7
    assert time.monotonic() - started < 2


# -- ProofAutoGrader: through the fake server --------------------------------------------------


@pytest.mark.parametrize("reply, expected", [
    ("Step 1 is fine.\n<points>7 out of 7</points>", "correct"),
    ("A small slip in step 3.\n<points>6 out of 7</points>", "almost"),
    ("Only the first lemma.\n<points>1 out of 7</points>", "partial"),
    ("Nothing useful.\n<points>0 out of 7</points>", "incorrect"),
    ("<points>7 out of 7</points>\nOn reflection, step 4 fails.\n<points>1 out of 7</points>", "correct"),
    ("Good progress.\n<points>4 out of 7</points>", "None"),
    ("I would give it six points.", "None"),
    ('{"points": 6}', "None"),
])
def test_autograder_forward_returns_the_label(provider, tmp_path, reply, expected):
    provider.set_replies([reply])
    transcript = tmp_path / "chat.md"
    agent = proofautograder.TaskAgent(model=MODEL, chat_history_file=str(transcript))
    prediction, history = agent.forward(GRADING_INPUTS)
    assert prediction == expected
    assert provider.count == 1
    assert history[-1] == {"role": "assistant", "content": reply}
    text = transcript.read_text()
    assert reply in text and f"label: {expected}" in text


def test_autograder_prompt_has_the_references_sections_in_its_order(provider):
    provider.set_replies(["<points>7 out of 7</points>"])
    proofautograder.TaskAgent(model=MODEL).forward(dict(GRADING_INPUTS, domain="imo_proof_grading"))
    (prompt,) = prompts(provider)
    assert "\n" not in prompt.split("## How points are awarded")[0].strip()  # one opening paragraph
    order = ["## How points are awarded", "7 points (correct)", "6 points (almost correct)",
             "1 point (partial progress)", "0 points (incorrect)", "## What you are given", "## How to grade",
             "1. Study the references", "2. Check every step", "3. Measure the progress", "4. Decide the score",
             "## How to answer", "<points>N out of 7</points>", "only the first points tag", "PROBLEM-TEXT",
             "REFERENCE-TEXT", "GUIDELINES-TEXT", "STUDENT-TEXT", "<points>7 out of 7</points>",
             "<points>6 out of 7</points>", "<points>1 out of 7</points>", "<points>0 out of 7</points>"]
    places = [prompt.find(part) for part in order]
    assert -1 not in places and places == sorted(places)
    assert prompt.rstrip().endswith("<points>0 out of 7</points>")
    assert "the guidelines decide" in prompt  # they take precedence over the general scale


def test_autograder_answers_none_without_a_call_when_an_input_is_missing(provider, tmp_path):
    inputs = {k: v for k, v in GRADING_INPUTS.items() if k != "grading_guidelines"}
    transcript = tmp_path / "chat.md"
    prediction, history = proofautograder.TaskAgent(model=MODEL, chat_history_file=str(transcript)).forward(inputs)
    assert (prediction, history) == ("None", [])
    assert provider.requests == [] and "missing inputs: grading_guidelines" in transcript.read_text()


def test_autograder_asks_small_models_for_points_as_json(provider, monkeypatch):
    provider.set_replies(['{"points": 6}', '{"points": 5}'])
    monkeypatch.setenv("AGENT_STRUCTURED_MODELS", MODEL)  # what a run sets for its local models
    agent = proofautograder.TaskAgent(model=MODEL)
    assert agent.forward(GRADING_INPUTS)[0] == "almost"
    assert agent.forward(GRADING_INPUTS)[0] == "None"
    sent = provider.requests[-1]["json"]["response_format"]
    assert sent["schema"]["properties"]["points"] == {"type": "integer", "enum": [0, 1, 6, 7]}


def test_autograder_lets_strong_models_reason_to_the_tag(provider):
    provider.set_replies(["<points>1 out of 7</points>"])
    proofautograder.TaskAgent(model=MODEL).forward(GRADING_INPUTS)
    assert "response_format" not in provider.requests[-1]["json"]


def test_autograder_sends_the_references_temperature_and_output_limit(provider):
    provider.set_replies(["<points>7 out of 7</points>"])
    proofautograder.TaskAgent(model=MODEL).forward(GRADING_INPUTS)
    (request,) = [r["json"] for r in provider.requests]
    assert request["temperature"] == 0 and request["max_tokens"] == 16384  # agent/llm.py's defaults there
    assert "max_completion_tokens" not in request


def test_autograder_through_the_gateway_is_not_given_the_gateways_output_cap(gateway_factory, fake_openai,
                                                                            monkeypatch):
    gw = gateway_factory()  # its own cap for a request without one: gateway.max_output_tokens, 32,768
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", [MODEL]))
    fake_openai.set_replies(["<points>6 out of 7</points>"])
    assert proofautograder.TaskAgent(model=MODEL).forward(GRADING_INPUTS)[0] == "almost"
    (request,) = [r["json"] for r in fake_openai.requests]
    assert (request["temperature"], request["max_tokens"]) == (0, 16384)


@pytest.mark.parametrize("model, sent", [
    ("openai/o4-mini", {"temperature": 0.0, "max_tokens": 16384}),
    ("anthropic/claude-sonnet-4-5-20250929", {"temperature": 0.0, "max_tokens": 16384}),
    ("openai/gpt-5", {"max_completion_tokens": 16384}),  # its default temperature only
    ("openai/gpt-5-mini", {"max_completion_tokens": 16384}),
    ("openai/gpt-5.2", {"temperature": 0.0, "max_completion_tokens": 16384}),
    ("anthropic/claude-3-haiku-20240307", {"temperature": 0.0, "max_tokens": 4096}),
])
def test_sampling_follows_the_references_rules_by_model_name(model, sent):
    assert proofautograder.reference_sampling(model) == sent


def test_autograder_rejects_other_domains(provider):
    with pytest.raises(ValueError, match="imo_proof"):
        proofautograder.TaskAgent(model=MODEL).forward(dict(GRADING_INPUTS, domain="imo_proof"))
    assert provider.requests == []


# -- proof solver: parsing ---------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("All steps hold.\n<verdict>pass</verdict>", True),
    ("<verdict> FAIL </verdict>", False),
    ("<verdict>pass</verdict> but wait, step 2 is wrong.\n<verdict>fail</verdict>", False),
    ("The proof is fine, I pass it.", None),
    ("<verdict>maybe</verdict>", None),
    ("", None),
])
def test_parse_verdict(text, expected):
    assert parse_verdict(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("Here it is.\n<proof>\nBy induction.\n</proof>\nDone.", "By induction."),
    ("<proof>draft</proof> better: <PROOF>final</PROOF>", "final"),
    ("I will use <proof> tags.\n<proof>the real one</proof>", "the real one"),
    ("<proof>cut off by the token lim", "cut off by the token lim"),
    ('<json>{"response": "  from JSON  "}</json>', "from JSON"),
    ("  Just a proof: $\\frac{a}{b} > 0$.  ", "Just a proof: $\\frac{a}{b} > 0$."),
    ("<proof>  </proof>", ""),
    ("", ""),
])
def test_extract_proof(text, expected):
    assert extract_proof(text) == expected


# -- proof solver: through the fake server -----------------------------------------------------


def solve(provider, replies, tmp_path=None):
    provider.set_replies(replies)
    transcript = str(tmp_path / "chat.md") if tmp_path else None
    return proof_solver.TaskAgent(model=MODEL, chat_history_file=transcript).forward(PROOF_INPUTS)


def test_solver_stops_after_a_first_pass(provider, tmp_path):
    prediction, history = solve(provider, ["<proof>P1</proof>", "Fine.\n<verdict>pass</verdict>"], tmp_path)
    assert prediction == "P1"
    assert provider.count == 2 and len(history) == 4
    sent = prompts(provider)
    assert PROOF_INPUTS["problem"] in sent[0]
    assert "P1" in sent[1] and "no reference solution" in sent[1]
    text = (tmp_path / "chat.md").read_text()
    assert "<verdict>pass</verdict>" in text and "## prediction\n\nP1" in text


def test_solver_refines_after_a_fail(provider):
    prediction, _ = solve(provider, [
        "<proof>P1</proof>",
        "Step 2 divides by zero.\n<issues>\n- ISSUE-DIV-ZERO\n</issues>\n<verdict>fail</verdict>",
        "<proof>P2</proof>",
        "<issues>none</issues><verdict>pass</verdict>",
    ])
    assert prediction == "P2"
    assert provider.count == 4
    sent = prompts(provider)
    assert "P1" in sent[2] and "ISSUE-DIV-ZERO" in sent[2] and "Step 2 divides" not in sent[2]
    assert "P2" in sent[3]


def test_solver_stops_at_the_call_budget(provider):
    replies = ["<proof>P1</proof>"]
    for n in range(2, 10):
        replies += ["<issues>- wrong</issues><verdict>fail</verdict>", f"<proof>P{n}</proof>"]
    prediction, history = solve(provider, replies)
    assert provider.count == MAX_CALLS == len(history) // 2
    assert parse_verdict(history[-1]["content"]) is False  # the budget ends on a verdict
    assert prediction == f"P{MAX_CALLS // 2}"


def test_solver_treats_an_unreadable_verdict_as_a_fail(provider):
    report = "Looks good to me overall."
    prediction, _ = solve(provider, ["<proof>P1</proof>", report, "<proof>P2</proof>", "<verdict>pass</verdict>"])
    assert prediction == "P2" and provider.count == 4
    assert report in prompts(provider)[2]  # without an issues tag the whole report is the feedback


def test_solver_keeps_the_previous_proof_when_a_refinement_is_empty(provider):
    prediction, _ = solve(provider, ["<proof>P1</proof>", "<verdict>fail</verdict>", "<proof></proof>",
                                     "<verdict>pass</verdict>"])
    assert prediction == "P1"
    assert "P1" in prompts(provider)[3]  # the kept proof is what gets verified next


def test_solver_rejects_other_domains(provider):
    with pytest.raises(ValueError, match="imo_grading"):
        proof_solver.TaskAgent(model=MODEL).forward(dict(GRADING_INPUTS))
    assert provider.requests == []


def test_domains():
    from optimizer.initial_agents import INITIAL_AGENTS

    assert proofautograder.DOMAINS == ("imo_grading", "imo_proof_grading")
    assert proof_solver.DOMAINS == ("imo_proof",)
    # The run checks an initial agent's domains against what its module declares, read as data.
    assert INITIAL_AGENTS["proofautograder"].domains == proofautograder.DOMAINS
    assert INITIAL_AGENTS["proof_solver"].domains == proof_solver.DOMAINS
    assert INITIAL_AGENTS["default"].domains is None
