"""Racing in the real loop (loop.racing): a child that cannot reach the best is raced out on val, keeps the
rows it has and says so, and a kill in the middle of its race is resumed to the same verdict with no row paid
twice. The fake provider plays both models: the initial agent is right on every train row and on every other
val row (val 0.5 on its first 40), the child's edit (SPOIL) keeps train right and gets every val row wrong."""

import sqlite3

import pandas as pd
import pytest

from hyperagents import load_run
from support.cli import cli_env, run_cli
from support.scripted_loop import DATA, events, loop_config, nodes, start_and_kill_when, tool_call

SPOIL = "SPOIL-VAL-9"
EDIT = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": "You are an expert grader", "new_str": f"{SPOIL} You are an expert grader"}}
TRAIN = {r["Response"].strip(): r["Reward"] for r in
         pd.read_csv(DATA / "gradingbench_filtered_100_train.csv").to_dict("records")}
VAL = [(r["Response"].strip(), r["Reward"]) for r in
       pd.read_csv(DATA / "gradingbench_filtered_100_val.csv").to_dict("records")]


def wrong(label: str) -> str:
    return "incorrect" if label.lower() != "incorrect" else "correct"


def respond(request: dict) -> str:
    messages = request["messages"]
    opening = " ".join(str(m["content"]) for m in messages[:2])
    if "/workspace" in opening and "/feedback" in opening:  # the meta agent: one edit, then done
        return tool_call(EDIT) if not any(m["role"] == "assistant" for m in messages) else "Done."
    user = str(messages[-1]["content"])
    if "## Student's answer" not in user:
        return "ok"
    answer = user.split("## Student's answer\n", 1)[1].rsplit("\n\nThink the verification", 1)[0].strip()
    if answer in TRAIN:
        label = TRAIN[answer]
    else:
        index, label = next((i, lab) for i, (text, lab) in enumerate(VAL) if text == answer)
        label = wrong(label) if SPOIL in user or index % 2 else label
    return f'<json>{{"response": "{label.lower()}"}}</json>'


def val_journal_rows(run_dir, rows: int) -> int:
    """Rows in the journal of node 1's val evaluation of `rows` rows (0 before it started)."""
    found = [e for e in events(run_dir) if e["event"] == "split_start" and e["node_id"] == "1"
             and e["split"] == "val" and e["rows"] == rows]
    journal = run_dir / "evals" / found[0]["key"] / "predictions.jsonl" if found else None
    return len(journal.read_text().splitlines()) if journal and journal.exists() else 0


@pytest.mark.e2e
def test_a_child_below_the_best_is_raced_out_and_a_kill_mid_race_pays_no_row_twice(tmp_path, fake_openai):
    fake_openai.set_responder(respond)
    fake_openai.latency = 0.3
    config = loop_config(tmp_path)
    (tmp_path / "loop.yaml").write_text(open(config).read().replace("eval_samples: 20", "eval_samples: 40"))
    run_dir = tmp_path / "out" / "run"
    first = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
             "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
             "--max_generation", "1", "--parent_selection", "best"]
    # Killed in the race's second chunk (val rows 11-20), its first chunk's 10 rows kept.
    start_and_kill_when(tmp_path, fake_openai, first, lambda d: val_journal_rows(d, 20) >= 13)
    assert "1" not in nodes(run_dir)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    found = nodes(run_dir)
    assert found["initial"]["scores"]["imo_grading"] == {"train": 1.0, "val": 0.5}
    child = found["1"]
    assert child["status"] == "ok" and child["full_eval"] == {"imo_grading": False}
    assert child["samples"]["imo_grading"] == {"train": 10, "val": 20}  # no train row past the screening
    assert child["scores"]["imo_grading"]["val"] == 0.0
    assert child["raced_out"].startswith("raced out after 20 of 40 rows: 0.000 so far, at most ")
    assert child["raced_out"].endswith("below the best node initial's score 0.500")
    assert "(raced out after 20 of 40 rows); cost $" in r.stdout and "; race: 0.000 so far" in r.stdout
    assert "best node initial (generation 0" in r.stdout and (view := load_run(run_dir)).best.id == "initial"
    assert view.nodes["1"].raced_out == child["raced_out"]
    from apps.report import write_report

    page = write_report(run_dir, tmp_path / "report.html").read_text()
    assert "n=20 raced out</small>" in page and 'title="raced out after 20 of 40 rows: 0.000 so far' in page
    # No row paid twice: node 1's task calls are its 10 screening rows and 20 val rows, but for the rows in
    # flight at the kill (5 workers); the resumed chunk started from the journal it had.
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    paid = db.execute("SELECT COUNT(*) FROM calls WHERE node = '1' AND role = 'task' AND cache_hit = 0").fetchone()[0]
    assert 30 <= paid <= 30 + 5, paid
    assert val_journal_rows(run_dir, 20) == 20 and val_journal_rows(run_dir, 30) == 0  # the race stopped at 20
