"""Answer extraction of the evolvable agent toolkit, and the initial task agent's labels."""

import pytest

from agent.extract import extract_field, extract_jsons, extract_label

GRADES = ["incorrect", "partial", "almost", "correct"]


@pytest.mark.parametrize("text, expected", [
    ('<json>{"response": "Correct"}</json>', "correct"),
    ('Reasoning...\n```json\n{"response": " partial "}\n```', "partial"),
    ('{"response": "almost"}', "almost"),
    ("Incorrect", "incorrect"),
    ("**Almost**.", "almost"),
    ("The proof has a gap, so the grade is incorrect.", "incorrect"),  # not read as "correct"
    ("First I thought correct, but the final grade is partial", "partial"),  # the last mention wins
    ('<json>{"response": "The answer is Almost"}</json>', "almost"),
    ('<json>{"response": "7 points"}</json> so it is correct', "correct"),
    ('<json>{"response": "seven points"}</json>', None),
    ("I cannot decide.", None),
    ("", None),
])
def test_extract_label(text, expected):
    assert extract_label(text, GRADES) == expected


def test_last_json_wins_and_tags_beat_bare_objects():
    text = 'draft {"response": "a"} <json>{"response": "b"}</json> <json>{"response": "c"}</json>'
    assert [o["response"] for o in extract_jsons(text)] == ["b", "c"]
    assert extract_field(text) == "c"
    assert extract_field('{"x": {"response": "nested"}}') is None
    assert extract_jsons("{not json} {\"ok\": 1}") == [{"ok": 1}]


def test_task_agent_turns_label_like_answers_into_labels(gateway_factory, fake_openai, monkeypatch, tmp_path):
    from task_agent import TaskAgent

    gw = gateway_factory()
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", ["openai/fake"]))
    inputs = {"domain": "imo_grading", "problem": "P", "solution": "S", "grading_guidelines": "G",
              "student_answer": "A"}
    answers = {"The grade: Almost.": "almost", '<json>{"response": "INCORRECT"}</json>': "incorrect",
               "no idea": "None"}
    for reply, expected in answers.items():
        fake_openai.set_replies([reply])
        transcript = tmp_path / "t.md"
        prediction, history = TaskAgent(model="openai/fake", chat_history_file=str(transcript)).forward(inputs)
        assert prediction == expected
        assert history[-1] == {"role": "assistant", "content": reply}
        assert "## prediction" in transcript.read_text()
    prompt = fake_openai.requests[-1]["json"]["messages"][0]["content"]
    assert all(part in prompt for part in ("## Problem\nP", "## Reference solution\nS", "## Student's answer\nA"))
