"""Search beyond the paper through the real loop (issue 30): the CLI, the sandboxed meta agent
scripted on the fake provider, real evaluations. Each strategy's choice is read back from the
run's own log (archive.jsonl's parent_chosen) and checked against what it must have been; a run
killed with SIGKILL and resumed chooses as a run never killed with the same seed."""

import pytest

from support.cli import cli_env, run_cli, run_loop
from support.scripted_loop import IMPROVE, events, loop_config, nodes, responder, start_and_kill_when

pytestmark = pytest.mark.e2e


def chosen(run_dir) -> dict[int, dict]:
    """generation -> its parent_chosen event."""
    return {e["generation"]: e for e in events(run_dir) if e["event"] == "parent_chosen"}


def test_pareto_drops_a_node_whose_every_row_a_better_node_also_leads(tmp_path, fake_openai):
    # Node 1 answers every row right; the initial agent only the rows whose label is "incorrect",
    # so every row the initial node leads on, node 1 leads on too.
    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "3", "--parent_selection", "pareto", "--seed", "1",
                 config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    picks = chosen(run_dir)
    assert picks[1]["candidates"] == {"initial": {"score": pytest.approx(picks[1]["candidates"]["initial"]["score"]),
                                                  "children": 0, "p": 1.0}}
    for generation in (2, 3):
        assert picks[generation]["strategy"] == "pareto"
        assert {k: c["p"] for k, c in picks[generation]["candidates"].items()} == {"initial": 0.0, "1": 1.0}
        assert nodes(run_dir)[str(generation)]["parent"] == "1"


def islands_run(tmp_path, fake, *extra):
    tmp_path.mkdir(exist_ok=True)
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("search:\n  islands: {islands: 2, migrate_every: 2}\n")  # the strategy's own settings
    return ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
            "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
            "--max_generation", "5", "--parent_selection", "islands", "--seed", "7", *extra]


def test_islands_keep_a_lineage_to_its_island_until_it_migrates_and_a_killed_run_chooses_the_same(
        tmp_path, fake_openai):
    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    straight = tmp_path / "straight"
    r = run_cli("run_optimization", *islands_run(straight, fake_openai), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    picks = chosen(straight / "out" / "run")
    # Node 1 (island 1) is not on island 0 at generation 2; it migrates there after generation 2.
    assert set(picks[2]["candidates"]) == {"initial"} or picks[2]["candidates"]["1"]["p"] == 0.0
    assert picks[3]["candidates"]["1"]["p"] > 0 and picks[4]["candidates"]["1"]["p"] > 0

    killed = tmp_path / "killed"
    fake_openai.set_responder(responder({1: [IMPROVE]}, []))  # the script counts meta runs from the start again
    start_and_kill_when(killed, fake_openai, islands_run(killed, fake_openai),
                        lambda d: any(e["event"] == "gen_start" and e.get("generation") == 3 for e in events(d)))
    r = run_cli("run_optimization", "--resume_from", str(killed / "out" / "run"), env=cli_env(fake_openai),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    again = chosen(killed / "out" / "run")
    assert {g: e["parent"] for g, e in again.items()} == {g: e["parent"] for g, e in picks.items()}
    assert {g: n["parent"] for g, n in nodes(killed / "out" / "run").items()} == \
        {g: n["parent"] for g, n in nodes(straight / "out" / "run").items()}


def test_a_child_repeating_an_earlier_change_is_recorded_duplicate_and_costs_no_evaluation(tmp_path, fake_openai):
    import sqlite3

    # Two islands, no migration: generation 2 starts from the initial node too, and its meta agent
    # makes node 1's edit again.
    fake_openai.set_responder(responder({1: [IMPROVE], 2: [IMPROVE]}, []))
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("  novelty_threshold: 0.9\nsearch:\n  islands: {islands: 2, migrate_every: 100}\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "2", "--parent_selection", "islands", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert found["1"]["status"] == "ok" and found["2"]["parent"] == "initial"
    assert found["2"]["status"] == "duplicate" and "1.00 alike to node 1's" in found["2"]["error"]
    assert found["2"]["scores"] == {} and found["2"]["eval_keys"] == {}
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    assert db.execute("SELECT COUNT(*) FROM calls WHERE node = '2' AND role = 'task'").fetchone()[0] == 0
    assert "node 2 (parent initial): duplicate" in r.stdout


def test_a_change_reaching_for_the_label_is_flagged_suspicious_and_still_scored(tmp_path, fake_openai):
    reach = {"tool_name": "editor", "tool_input": {
        "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
        "old_str": "You are an expert grader", "new_str": "You are an expert grader (peek: 'Reward')"}}
    look = {"tool_name": "bash", "tool_input": {"command": "ls /workspace/domains/imo/ || true"}}
    fake_openai.set_responder(responder({1: [look, reach]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    node = nodes(run_dir)["1"]
    assert node["status"] == "ok" and node["scores"]["imo_grading"]["train"] is not None  # flags do not censor
    assert node["flags"] == ["its change names the hidden column 'Reward'",
                             "its meta agent's commands name /workspace/domains/imo/, on the scoring side"]
    line = next(x for x in r.stdout.splitlines() if x.startswith("node 1 (parent initial): ok"))
    assert line.endswith("; suspicious: " + "; ".join(node["flags"]))
    assert "Suspicious: this node" not in (run_dir / "report.html").read_text()  # the report lists, the page explains
    assert "suspicious" in (run_dir / "report.html").read_text()
    assert nodes(run_dir)["initial"]["flags"] == []


def bandit_args(tmp_path, *extra):
    tmp_path.mkdir(exist_ok=True)
    return ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
            "--task_model", "openai/fake", "--meta_model", "openai/fake-meta,openai/fake-meta-2",
            "--config", loop_config(tmp_path), "--max_generation", "4", "--seed", "5", *extra]


def test_a_bandit_over_two_meta_models_tries_each_then_keeps_the_one_that_gained_and_resumes_its_counts(
        tmp_path, fake_openai):
    import sqlite3

    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    straight = tmp_path / "straight"
    r = run_cli("run_optimization", *bandit_args(straight), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "meta one of openai/fake-meta, openai/fake-meta-2 each generation (ucb1 bandit" in r.stdout
    run_dir = straight / "out" / "run"
    made = {g: n["meta_model"] for g, n in nodes(run_dir).items()}
    # Each untried model first; then model 1, whose child gained, over model 2, whose did not (UCB1 by hand:
    # generation 3: 1 + sqrt(2 ln 2) against sqrt(2 ln 2); generation 4: 0.5 + sqrt(ln 3) against sqrt(2 ln 3)).
    assert made == {"initial": None, "1": "openai/fake-meta", "2": "openai/fake-meta-2", "3": "openai/fake-meta",
                    "4": "openai/fake-meta"}
    starts = {e["node_id"]: e["meta_model"] for e in events(run_dir) if e["event"] == "gen_start"}
    assert starts["2"] == "openai/fake-meta-2"
    # The gateway let each generation's meta agent call its own model only.
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    used = dict(db.execute("SELECT node, group_concat(DISTINCT model) FROM calls WHERE role = 'meta' GROUP BY node"))
    assert used == {"1": "openai/fake-meta", "2": "openai/fake-meta-2", "3": "openai/fake-meta",
                    "4": "openai/fake-meta"}
    assert "generation 2: node 2 from parent" in r.stdout and "at work on openai/fake-meta-2" in r.stdout
    report = (run_dir / "report.html").read_text()  # each model's generations, as the dashboard's run page shows
    assert "<h2>Meta models</h2>" in report and "<td>openai/fake-meta-2</td><td class=\"num\">1</td>" in report

    killed = tmp_path / "killed"
    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    start_and_kill_when(killed, fake_openai, bandit_args(killed),
                        lambda d: any(e["event"] == "gen_start" and e.get("generation") == 3 for e in events(d)))
    r = run_cli("run_optimization", "--resume_from", str(killed / "out" / "run"), env=cli_env(fake_openai),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {g: n["meta_model"] for g, n in nodes(killed / "out" / "run").items()} == made
    # The resumed run's plan says what the bandit had seen: generations 1 and 2, one per model.
    plan = next(line for line in r.stdout.splitlines() if line.startswith("bandit   "))
    assert "openai/fake-meta 1 generations (1 gained" in plan and "openai/fake-meta-2 1 generations (0 gained" in plan
