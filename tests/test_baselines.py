"""The baseline task agents, with litellm talking to the real fake server."""

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


@pytest.mark.parametrize("text, expected", [
    ("Checked.\n<points>6 out of 7</points>", 6),
    ("<points>0 out of 7</points>", 0),
    ("<POINTS>  7   OUT OF 7 </Points>", 7),
    ("<points>\n3\nout of\n7\n</points>", 3),
    ("<points>1 out of 7</points> then <points>7 out of 7</points>", 7),
    ("<points>7 out of 7</points> on reflection <points>1 out of 7</points>", 1),
    ("The solution deserves 7 out of 7.", None),
    ("", None),
    ("<points>8 out of 7</points>", None),
    ("<points>-1 out of 7</points>", None),
    ("<points>5 out of 7</points> final: <points>8 out of 7</points>", None),
    ("<points>six out of 7</points>", None),
    ("<points>5.5 out of 7</points>", None),
    ("<points>5 out of 10</points>", None),
    ("<points>5 out of 7", None),
    ('{"points": 6}', 6),  # constrained decoding's shape (small local models)
    ('{"points": 0}', 0),
    ('{"points": 8}', None),
    ('{"points": "6"}', None),
    ('{"points": true}', None),
    ('{"score": 6}', None),
    ('[6]', None),
])
def test_parse_points(text, expected):
    assert parse_points(text) == expected


@pytest.mark.parametrize("points, label", [
    (0, "incorrect"), (1, "partial"), (2, "partial"), (3, "partial"), (4, "partial"),
    (5, "almost"), (6, "almost"), (7, "correct"), (None, None),
])
def test_points_to_label(points, label):
    assert points_to_label(points) == label


# -- ProofAutoGrader: through the fake server --------------------------------------------------


@pytest.mark.parametrize("reply, expected", [
    ("Step 1 is fine.\n<points>7 out of 7</points>", "correct"),
    ("A small slip in step 3.\n<points>6 out of 7</points>", "almost"),
    ("Only the first lemma.\n<points>1 out of 7</points>", "partial"),
    ("Nothing useful.\n<points>0 out of 7</points>", "incorrect"),
    ("I would give it six points.", "None"),
    ("<points>9 out of 7</points>", "None"),
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


def test_autograder_prompt_carries_all_inputs_and_the_precedence_rule(provider):
    provider.set_replies(["<points>7 out of 7</points>"])
    proofautograder.TaskAgent(model=MODEL).forward(dict(GRADING_INPUTS, domain="imo_proof_grading"))
    (prompt,) = prompts(provider)
    for value in ("PROBLEM-TEXT", "REFERENCE-TEXT", "GUIDELINES-TEXT", "STUDENT-TEXT"):
        assert value in prompt
    assert "Where they differ from the general rubric, follow the grading guidelines." in prompt
    assert "<points>N out of 7</points>" in prompt
    assert prompt.index("REFERENCE-TEXT") < prompt.index("GUIDELINES-TEXT") < prompt.index("STUDENT-TEXT")


def test_autograder_asks_small_models_for_points_as_json(provider, monkeypatch):
    provider.set_replies(['{"points": 6}'])
    monkeypatch.setenv("AGENT_STRUCTURED_MODELS", MODEL)  # what a run sets for its local models
    prediction, _ = proofautograder.TaskAgent(model=MODEL).forward(GRADING_INPUTS)
    assert prediction == "almost"
    sent = provider.requests[-1]["json"]["response_format"]
    assert sent["schema"]["properties"]["points"] == {"type": "integer", "minimum": 0, "maximum": 7}


def test_autograder_lets_strong_models_reason_to_the_tag(provider):
    provider.set_replies(["<points>1 out of 7</points>"])
    proofautograder.TaskAgent(model=MODEL).forward(GRADING_INPUTS)
    assert "response_format" not in provider.requests[-1]["json"]


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
