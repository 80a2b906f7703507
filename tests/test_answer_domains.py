"""Final-answer domains: AMO-Bench grading, the AnswerBench split, AIME's two rules end to end, and a
harness run and a loop run on them like on any other domain."""

import json
import re
import sqlite3

import pandas as pd
import pytest

from domains import amo_bench
from support.cli import FAST_CONFIG, cli_env, run_cli, run_loop

# The answer checks themselves (AIME's two rules, math_equal) are tested in test_answer_checks.py.


# -- AMO-Bench ----------------------------------------------------------------------------------
AMO_ROWS = [
    {"question_id": "1", "prompt": "Compute pi to 4 places.", "answer": r"\boxed{3.1416}", "answer_type": "number"},
    {"question_id": "2", "prompt": "Which n work?", "answer": r"\boxed{\{1, 3, 5\}}", "answer_type": "set"},
    {"question_id": "3", "prompt": "Find f(x).", "answer": r"\boxed{x^2 + 2x + 1}", "answer_type": "variable"},
    {"question_id": "4", "prompt": "Describe the winner.", "answer": r"\boxed{\text{Bob wins when n is odd}}",
     "answer_type": "description"},
]


@pytest.fixture
def amo_file(tmp_path):
    path = tmp_path / "amo.jsonl"
    path.write_text("".join(json.dumps({**row, "solution": "..."}) + "\n" for row in AMO_ROWS))
    return path


def scripted_judge(yes_votes: int):
    votes = iter(["correct"] * yes_votes + ["incorrect"] * (5 - yes_votes))
    prompts = []

    def judge(prompt: str) -> str:
        prompts.append(prompt)
        return next(votes)

    judge.prompts = prompts
    return judge


def test_amo_bench_graders_by_answer_type(amo_file):
    rows = amo_bench.load(str(amo_file)).to_dict("records")
    number, numbers, variable, description = rows
    assert amo_bench.check(r"\boxed{3.14159}", number)  # rounded to 4 decimals
    assert not amo_bench.check(r"\boxed{3.15}", number)
    assert amo_bench.check(r"\boxed{\{5, 3, 1\}}", numbers) and not amo_bench.check(r"\boxed{\{1, 3\}}", numbers)
    assert amo_bench.check(r"\boxed{(x+1)^2}", variable)  # equal at random points
    assert amo_bench.check(r"\boxed{f(x) = (x+1)^2}", variable)  # the final expression is tried too
    assert not amo_bench.check(r"\boxed{(x-1)^2}", variable)
    judge = scripted_judge(3)
    assert amo_bench.check(r"\boxed{Bob, for odd n}", description, judge)
    assert len(judge.prompts) == 5 and "Bob wins when n is odd" in judge.prompts[0]
    assert not amo_bench.check(r"\boxed{Alice}", description, scripted_judge(2))
    with pytest.raises(ValueError, match="judges"):
        amo_bench.check(r"\boxed{Bob}", description)


def test_amo_bench_data_problems_are_one_clear_line(tmp_path, monkeypatch):
    from services.errors import UserError

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": "1", "prompt": "p"}) + "\n")
    with pytest.raises(UserError, match="lacks column"):
        amo_bench.load(str(bad))
    with pytest.raises(UserError, match="no such file"):
        amo_bench.load(str(tmp_path / "missing.jsonl"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="--data PATH"):
        amo_bench.load(None)


def test_amo_bench_report_with_judges(tmp_path, amo_file):
    from domains.base import use_data_files
    from domains.registry import get_domain

    use_data_files({"amo_bench": str(amo_file)})
    domain = get_domain("amo_bench")
    df = domain.load("train")
    df["prediction"] = [r"\boxed{3.1416}", r"\boxed{\{1,3\}}", r"\boxed{x^2+2x+1}", r"\boxed{Bob, odd n}"]
    report = domain.scorer.metrics(df, judge=scripted_judge(5))
    assert report["accuracy"] == 3 / 4 and report["question_ids_failed"] == ["2"]
    assert report["per_answer_type"]["set"]["accuracy"] == 0.0


@pytest.mark.e2e
def test_the_judges_calls_are_booked_to_the_node_they_scored(tmp_path, fake_openai, amo_file):
    def respond(request: dict) -> str:
        user = str(request["messages"][-1]["content"])
        if "You check answers to a competition math problem" in user:
            return "correct"
        return "<json>" + json.dumps({"response": r"\boxed{Bob, for odd n}"}) + "</json>"

    fake_openai.set_responder(respond)
    config = tmp_path / "loop.yaml"
    config.write_text(FAST_CONFIG + "models:\n  judge: openai/fake-judge\n"
                      "loop:\n  eval_samples: 4\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", "--data", f"amo_bench={amo_file}", config=config,
                 domains=["amo_bench"])
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    node = json.loads((run_dir / "nodes" / "initial" / "node.json").read_text())
    assert node["scores"]["amo_bench"] == {"train": 0.25}  # only the description row reads "Bob, for odd n"
    judged = sqlite3.connect(run_dir / "ledger.sqlite").execute(
        "SELECT COUNT(*), SUM(prompt_tokens + completion_tokens) FROM calls WHERE role = 'judge' AND node = 'initial'"
    ).fetchone()
    assert judged[0] == 5  # five judges voted on the one description answer
    assert node["tokens"]["judge"] == judged[1] > 0 and "judge" in node["cost_usd"]


# -- IMO-AnswerBench split -------------------------------------------------------------------------
def test_the_answerbench_split_is_the_recorded_one_and_stratified():
    from domains.imo.answerbench_split import load_split, make_split
    from domains.registry import get_domain

    split = load_split()
    assert split == make_split()
    assert {k: len(v) for k, v in split.items()} == {"train": 100, "val": 100, "test": 200}
    assert not set(split["train"]) & set(split["val"]) and not set(split["val"]) & set(split["test"])
    train = get_domain("imo_answer").load("train")
    assert train["Category"].value_counts().to_dict() == {c: 25 for c in
                                                        ("Algebra", "Combinatorics", "Geometry", "Number theory")}


# -- like any other domain -------------------------------------------------------------------------
def answer_from_truth(truths: dict[str, str], wrong: set[str]):
    """A fake model that answers every problem right, except those whose text is in `wrong`."""
    def respond(request: dict) -> str:
        user = str(request["messages"][-1]["content"])
        for problem, truth in truths.items():
            if problem in user:
                answer = "0" if problem in wrong else truth
                return "<json>" + json.dumps({"response": answer}) + "</json>"
        return "I do not know."
    return respond


@pytest.mark.e2e
def test_harness_and_report_on_aime(tmp_path, fake_openai):
    """Both AIME rules end to end: problem 1 (answer 70) in the issue's formats, problem 2 with its answer
    stated, problem 3 with the answer said first and another boxed last (right only by any-number)."""
    from domains.answer_domains import aime_tasks

    tasks = aime_tasks("I", [1, 2, 3])
    truths = dict(zip(tasks["question"], tasks["ground_truth"]))
    q1, q2, q3 = tasks["question"]
    assert truths[q1] == "70"
    outputs = {q1: "The bases are 21 and 49.\n**Final Answer:** 70", q2: f"The answer is: {truths[q2]}.",
               q3: f"Maybe {truths[q3]}? No: \\boxed{{1,070}}"}

    def respond(request: dict) -> str:
        user = str(request["messages"][-1]["content"])
        return "<json>" + json.dumps({"response": next(o for q, o in outputs.items() if q in user)}) + "</json>"

    fake_openai.set_responder(respond)
    config = tmp_path / "fast.yaml"
    config.write_text(FAST_CONFIG)
    env = cli_env(fake_openai)
    r = run_cli("domains.harness", "--domain", "aime2025", "--subset", "_I", "--num_samples", "3", "--model",
                "openai/fake", "--output_dir", str(tmp_path / "out"), "--run_id", "a", "--config", str(config),
                env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("domains.report", "--domain", "aime2025", "--dname", str(tmp_path / "out" / "a"), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "a" / "report.json").read_text())
    assert report["schema_version"] == 2  # 2 adds row_scores: each row id -> 1 if right, 0 if not
    assert report["row_scores"] == {"aime2025_i_1": 1.0, "aime2025_i_2": 1.0, "aime2025_i_3": 0.0}
    assert report["accuracy"] == pytest.approx(2 / 3) and report["question_ids_failed"] == ["aime2025_i_3"]
    assert report["accuracy_any_number"] == 1.0  # problem 3's answer is in its output
    assert report["per_subset"] == {"AIME2025-I": {"accuracy": pytest.approx(2 / 3), "correct": 2, "total": 3}}
    assert "accuracy_any_number 100.0%" in r.stdout and "accuracy         66.7%" in r.stdout
    sent = " ".join(str(q["json"]["messages"]) for q in fake_openai.requests)
    assert all(f'"{t}"' not in sent for t in truths.values() if len(t) > 2)  # no reference answer was sent


@pytest.mark.e2e
def test_the_loop_runs_on_imo_answer(tmp_path, fake_openai):
    from domains.registry import get_domain

    val = get_domain("imo_answer").load("val").head(3)
    train = get_domain("imo_answer").load("train").head(3)
    rows = pd.concat([train, val])
    fake_openai.set_responder(answer_from_truth(dict(zip(rows["Problem"], rows["Short Answer"])), wrong=set()))
    config = tmp_path / "loop.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 3\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", config=config, domains=["imo_answer"])
    assert r.returncode == 0, r.stderr[-3000:]
    node = json.loads((tmp_path / "out" / "run" / "nodes" / "initial" / "node.json").read_text())
    assert node["scores"]["imo_answer"] == {"train": 1.0, "val": 1.0}


@pytest.mark.e2e
def test_a_run_starts_from_sc_tir_and_its_code_runs_in_the_sandbox(tmp_path, fake_openai):
    """Every candidate runs one block that prints its user id, then boxes what it printed:
    the vote is the id code had when it ran, the sandbox's 65534 rather than ours."""
    def respond(request: dict) -> str:
        printed = re.search(r"```output\n(.*?)\n", str(request["messages"][-1]["content"]))
        if printed:
            return f"So the answer is \\boxed{{{printed.group(1)}}}."
        return "Let me check.\n```python\nimport os\nprint(os.getuid())\n```"

    fake_openai.set_responder(respond)
    config = tmp_path / "loop.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 1\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--initial_agent", "sc_tir", "--max_generation", "0", config=config,
                 domains=["aime2025"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "initial task agent sc_tir" in r.stdout
    run_dir = tmp_path / "out" / "run"
    node = json.loads((run_dir / "nodes" / "initial" / "node.json").read_text())
    predictions = pd.read_csv(run_dir / "evals" / node["eval_keys"]["aime2025"]["train"] / "predictions.csv")
    assert list(predictions["prediction"].astype(str)) == ["65534"]
    # 8 candidates, 2 calls each, all counted for the row although they ran on the agent's own threads.
    calls = sqlite3.connect(run_dir / "ledger.sqlite").execute(
        "SELECT COUNT(*), SUM(prompt_tokens) FROM calls WHERE role = 'task'").fetchone()
    assert calls[0] == 16 and predictions["prompt_tokens"][0] == calls[1]


@pytest.mark.e2e
def test_the_meta_agents_try_command_checks_answers_as_mathematics(tmp_path, fake_openai):
    """The try command inside the meta agent's sandbox counts "0.5" right for the answer 1/2."""
    from domains.registry import get_domain

    train = get_domain("imo_answer").load("train").head(2)
    try_call = {"tool_name": "bash", "tool_input": {"command": "python /opt/hyperagents/try_agent.py --rows 2"}}

    def respond(request: dict) -> str:
        messages = request["messages"]
        if "/workspace" in " ".join(str(m["content"]) for m in messages[:2]):
            if sum(1 for m in messages if m["role"] == "assistant") == 0:
                return f"<json>{json.dumps(try_call)}</json>"
            return "Done."
        user = str(messages[-1]["content"])
        row = next((r for r in train.to_dict("records") if r["Problem"] in user), None)
        if row is None:
            return "OK"  # the run's first check of each model
        answer = "\\left(" + row["Short Answer"].strip().strip("$") + "\\right)"  # not the label's text
        return "<json>" + json.dumps({"response": answer}) + "</json>"

    fake_openai.set_responder(respond)
    config = tmp_path / "loop.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 2\n  skip_staged_eval: true\n  meta_timeout_s: 120\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", config=config, domains=["imo_answer"])
    assert r.returncode == 0, r.stderr[-3000:]
    transcript = (tmp_path / "out" / "run" / "untrusted" / "1" / "meta" / "meta_chat_history.md").read_text()
    assert "accuracy 2/2 = 1.000" in transcript, transcript[-2000:]
