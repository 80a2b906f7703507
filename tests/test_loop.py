"""The self-improvement loop end to end: CLI -> sandboxed meta agent -> git -> staged evaluation.

The fake provider plays both models. As the meta model it follows a script of tool
calls per generation; as the task model it grades with "incorrect" unless the prompt
carries the marker that the scripted improving edit adds, in which case it answers
with the true label (looked up in the data by the student's answer), so the improved
agent scores 1.0 and must be found, fully evaluated and selected.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from support.cli import cli_env, run_cli, run_loop
from support.kill_points import CallGate, start_and_kill_at_call
from support.scripted_loop import (
    IMPROVE,
    MARKER,
    META_ONLY,
    MUTATE_META,
    events,
    loop_config,
    nodes,
    responder,
    start_and_kill_when,
)

PROTECTED = {"tool_name": "bash", "tool_input": {
    "command": "mkdir -p /workspace/domains && echo 'cheat = 1' > /workspace/domains/metrics.py"}}
BREAK = {"tool_name": "bash", "tool_input": {"command": "echo 'def broken(:' >> /workspace/task_agent/__init__.py"}}


def task_calls(run_dir: Path, node: str) -> int:
    import sqlite3

    db = sqlite3.connect(run_dir / "ledger.sqlite")
    return db.execute("SELECT COUNT(*) FROM calls WHERE node = ? AND role = 'task'", (node,)).fetchone()[0]


@pytest.mark.e2e
def test_an_improving_edit_is_found_fully_evaluated_and_selected(tmp_path, fake_openai):
    meta_calls = []
    fake_openai.set_responder(responder({1: [IMPROVE]}, meta_calls))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "2", "--parent_selection", "best",
                 config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert set(found) == {"initial", "1", "2"}
    initial, improved = found["initial"], found["1"]
    assert improved["status"] == "ok" and improved["full_eval"] == {"imo_grading": True}
    assert improved["scores"]["imo_grading"]["val"] == 1.0 > initial["scores"]["imo_grading"]["val"]
    assert improved["samples"]["imo_grading"] == {"train": 20, "val": 20}
    assert MARKER in (run_dir / "nodes" / "1" / "patch.diff").read_text()
    # Generation 2 starts from the best node; its meta agent did nothing.
    assert found["2"]["parent"] == "1" and found["2"]["status"] == "no_change"
    assert "best node 1" in r.stdout
    # The console subscriber tells the run as it happens, one line per event, in order.
    lines = r.stdout.splitlines()
    told = [next(i for i, line in enumerate(lines) if line.startswith(start))
            for start in ("node initial (parent None): ok; imo_grading/train=",
                          "generation 1: node 1 from parent initial",
                          "node 1: ok; changed 1 file (+1 -1)",
                          "node 1 (parent initial): ok; imo_grading/train=1.000")]
    assert told == sorted(told)
    # The meta agent was told where things are and how many generations are left.
    opening = " ".join(str(m["content"]) for m in meta_calls[0]["messages"][:2])
    assert "/feedback" in opening and "try_agent.py" in opening and "Iterations left in this run: 1" in opening
    # Only train results are there for later meta agents, never val.
    assert (run_dir / "feedback" / "1" / "imo_grading" / "predictions.csv").exists()
    assert not any("val" in str(p) for p in (run_dir / "feedback").rglob("*"))
    assert (run_dir / "untrusted" / "1" / "meta" / "meta_chat_history.md").exists()
    assert improved["cost_usd"].keys() >= {"meta", "task"}


@pytest.mark.e2e
def test_protected_edits_are_dropped_broken_imports_and_no_ops_are_marked(tmp_path, fake_openai):
    fake_openai.set_responder(responder({1: [PROTECTED], 2: [BREAK], 3: []}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "3", "--parent_selection", "latest",
                 config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(tmp_path / "out" / "run")
    assert found["1"]["status"] == "no_change" and found["1"]["patch"]["dropped"] == ["domains"]
    assert found["2"]["status"] == "load_failed" and "SyntaxError" in found["2"]["error"]
    assert found["3"]["status"] == "no_change"
    # A failed child never takes a parent's place: generation 3 started from a valid node.
    assert found["3"]["parent"] == "initial"


@pytest.mark.e2e
def test_a_task_agent_that_did_not_change_costs_no_task_call(tmp_path, fake_openai):
    fake_openai.set_responder(responder({1: [META_ONLY]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert found["1"]["status"] == "ok" and found["1"]["scores"] == found["initial"]["scores"]
    assert task_calls(run_dir, "initial") == 40  # 10 staged rows, then 10 more train (not 20) and 20 val
    assert task_calls(run_dir, "1") == 0
    # The try command's train rows: a file a kill cut short is written whole again when the run resumes.
    train = run_dir / "train_data" / "imo_grading_train.jsonl"
    whole = train.read_text()
    assert len(whole.splitlines()) == 100 and all(json.loads(line)["label"] for line in whole.splitlines())
    train.write_text(whole[: len(whole) // 3])
    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=cli_env(fake_openai), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert train.read_text() == whole and sorted(p.name for p in train.parent.iterdir()) == [train.name]


@pytest.mark.e2e
def test_screening_stages_from_the_config_stop_a_node_at_the_bar_it_misses(tmp_path, fake_openai):
    fake_openai.set_responder(responder({}, []))
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("  stages: [[5, 0], [12, 0.99]]\n")  # the initial agent passes the first bar, never the second
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "staged 5 train rows (on if overall_accuracy > 0), then staged 12 train rows" in r.stdout
    run_dir = tmp_path / "out" / "run"
    initial = nodes(run_dir)["initial"]
    assert initial["full_eval"] == {"imo_grading": False} and initial["samples"]["imo_grading"] == {"train": 12}
    assert 0 < initial["scores"]["imo_grading"]["train"] <= 0.99
    assert task_calls(run_dir, "initial") == 12  # the second stage starts from the first one's 5 rows


def journal_rows(run_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (run_dir / "evals").glob("*/predictions.jsonl"))


@pytest.mark.e2e
def test_kills_at_any_step_lose_nothing_and_pay_nothing_twice(tmp_path, fake_openai):
    meta_calls = []
    # The edit comes in generation 1 (1 iteration left), however often it is redone.
    fake_openai.set_responder(responder({1: [IMPROVE]}, meta_calls, by_iterations_left=True))
    fake_openai.latency = 0.3
    config = loop_config(tmp_path)
    with open(config, "a") as f:  # the rows are counted from the journals, which a race's looks copy forward
        f.write("  racing: false\n")  # (tests/test_racing_loop.py kills a race)
    first = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
             "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
             "--max_generation", "2", "--parent_selection", "best"]
    resume = ["--resume_from", str(tmp_path / "out" / "run")]
    # 1. in the middle of the initial node's evaluation
    start_and_kill_when(tmp_path, fake_openai, first, lambda d: (d / "evals").exists() and journal_rows(d) >= 12)
    # 2. while the meta agent of generation 1 works (its first model call is made)
    start_and_kill_when(tmp_path, fake_openai, resume, lambda d: len(meta_calls) >= 1)
    assert not any(e["event"] == "meta_done" for e in events(tmp_path / "out" / "run"))
    # 3. after its change is committed, in the middle of the evaluation of node 1
    start_and_kill_when(tmp_path, fake_openai, resume,
                        lambda d: any(e["event"] == "meta_done" for e in events(d)) and journal_rows(d) >= 45)
    meta_runs_before = sum(1 for r in meta_calls if not any(m["role"] == "assistant" for m in r["messages"]))
    r = run_cli("run_optimization", *resume, env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert set(found) == {"initial", "1", "2"} and found["1"]["status"] == "ok"
    recorded = [e["node_id"] for e in events(run_dir) if e["event"] == "node_recorded"]
    assert sorted(recorded) == ["1", "2", "initial"]  # each node counted once
    # The meta agent of node 1 was redone after the kill that interrupted it (its first,
    # temperature-0 request may come from the gateway's cache) and never after its change
    # was committed: generation 2 is the only meta run after the last kill.
    meta_runs = sum(1 for r in meta_calls if not any(m["role"] == "assistant" for m in r["messages"]))
    assert meta_runs - meta_runs_before == 1
    import sqlite3
    from datetime import datetime

    db = sqlite3.connect(run_dir / "ledger.sqlite")
    committed = next(e for e in events(run_dir) if e["event"] == "meta_done" and e["node_id"] == "1")
    since = datetime.fromisoformat(committed["time"]).timestamp() + 1  # event times have 1 s resolution
    late = db.execute("SELECT COUNT(*) FROM calls WHERE node = '1' AND role = 'meta' AND ts > ?", (since,))
    assert late.fetchone()[0] == 0
    # Every evaluated row was paid once, but for at most the rows in flight at each kill (5
    # workers, 3 kills). The full train runs of the two evaluated nodes start from their
    # staged runs' 10 rows, copied, not paid again.
    paid = db.execute("SELECT COUNT(*) FROM calls WHERE role = 'task' AND cache_hit = 0").fetchone()[0]
    rows = journal_rows(run_dir) - 2 * 10
    assert rows <= paid <= rows + 3 * 5


SECOND_LOOK = {"tool_name": "editor", "tool_input": {  # a change of the task agent's prompt that keeps the marker
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": "You are an expert grader", "new_str": "You are an expert grader, on a second look,"}}
CHAOS_KILLS = 5


def archive_of(run_dir: Path) -> dict:
    """What a run leaves that a kill must not change: each node's record (less its times, costs and
    commit hash), its change and its commit's tree, and the rows of each evaluation."""
    from domains.harness.journal import read_journal

    found = {}
    for node_id, node in nodes(run_dir).items():
        tree = subprocess.run(["git", "--git-dir", str(run_dir / "repo"), "rev-parse", f"{node['commit']}^{{tree}}"],
                              capture_output=True, text=True, check=True).stdout.strip() if node["commit"] else None
        diff = run_dir / "nodes" / node_id / "patch.diff"
        found[node_id] = {**{k: v for k, v in node.items() if k not in ("commit", "cost_usd", "tokens", "seconds",
                                                                         "created_at")},
                          "tree": tree, "patch.diff": diff.read_text() if diff.exists() else None}
    for journal in sorted((run_dir / "evals").glob("*/predictions.jsonl")):
        rows = [(r["id"], r["prediction"], r["error"]) for r in read_journal(journal)]
        found[f"eval {journal.parent.name}"] = sorted(rows)
    return found


@pytest.mark.e2e
# --parallel 2 passed 8 seeds too (up to 170 s each on a loaded machine): CHAOS_PARALLEL=2 runs it
@pytest.mark.parametrize("parallel", [int(os.environ.get("CHAOS_PARALLEL", "1"))])
def test_a_run_killed_at_random_moments_ends_as_an_uninterrupted_one_and_pays_again_only_what_was_in_flight(
        parallel, tmp_path, fake_openai):
    """Issue 36's chaos test: a seeded run is SIGKILLed at CHAOS_KILLS moments drawn at random, counted in
    provider calls so they land at a point of the run and not of the clock (support/kill_points.py): the
    n-th call of a start, or of its meta agent, held unanswered or answered and the next ones held, then
    the kill after a random delay (during a call, writing a row, the meta agent's tools, a commit, recording
    a node). Resumed after each kill, it must end with the archive of the same run left alone, having made
    the same calls, each again at most once per kill that caught it in flight: at most `--eval_workers`
    rows of each generation in flight, and of a meta agent only its call in flight (those it had answered,
    at temperature 0, come back from the gateway's cache). CHAOS_SEED=<seed> replays a draw."""
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(10**6))
    rng = random.Random(f"{seed}/{parallel}")
    workers = 2
    # By iterations left: generation 1 improves the task agent, 2 changes only the meta agent, 3 rewords the
    # task agent's prompt (so that no two evaluations ask the same).
    script = {2: [IMPROVE], 1: [MUTATE_META], 0: [SECOND_LOOK]}
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        # With --eval_samples 4: 4 train rows, then 4 val rows a node; the pictures drawn at the end only.
        f.write("  stages: [[4, 0]]\n  pictures_every_s: 86400\n")
    env = cli_env(fake_openai)

    def first(out: Path) -> list[str]:
        return ["--domain", "imo_grading", "--output_dir", str(out), "--run_id", "run", "--task_model", "openai/fake",
                "--meta_model", "openai/fake-meta", "--config", config, "--max_generation", "3", "--seed", "11",
                "--eval_samples", "4", "--eval_workers", str(workers), "--parallel", str(parallel)]

    reference = CallGate(responder(script, [], by_iterations_left=True))
    reference.arm(None)
    fake_openai.set_responder(reference)
    r = run_cli("run_optimization", *first(tmp_path / "reference"), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    asked = {c.key for c in reference.calls}
    assert len(asked) == reference.count()  # no call asks what another asked: a repeat is a call paid again
    total, meta_total = reference.count(), sum(c.meta for c in reference.calls)

    gate = CallGate(responder(script, [], by_iterations_left=True))
    fake_openai.set_responder(gate)
    run_dir = tmp_path / "chaos" / "run"
    kills: list[dict] = []
    at_meta = rng.sample(range(CHAOS_KILLS), 2)  # kills at a meta agent's call while it has calls left
    for k in range(CHAOS_KILLS):
        # Drawn among the calls not answered yet, all of which the run still has to make: a held call,
        # or an answered one with another left after it, keeps it from ending before the kill and
        # leaves a call for the next kill.
        left = CHAOS_KILLS - k
        meta_only = k in at_meta and gate.answered(meta_only=True) < meta_total
        pool = (meta_total - gate.answered(meta_only=True)) if meta_only else total - gate.answered()
        answer_it = pool > 1 and rng.random() < 0.5
        spread = pool if meta_only else -(-2 * pool // (left + 1))  # over the run, not all in its beginning
        nth = rng.randint(1, min(pool - answer_it, spread))
        argv = first(tmp_path / "chaos") if k == 0 else ["--resume_from", str(run_dir)]
        kills.append(start_and_kill_at_call(gate, argv, env, nth, meta_only, answer_it, rng.uniform(0, 0.6),
                                            tmp_path / f"kill-{k + 1}.log"))
    gate.arm(None)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=env, timeout=300)
    told = f"replay with CHAOS_SEED={seed}; kills: {kills}"
    assert r.returncode == 0, f"{told}\n{r.stderr[-3000:]}"

    assert archive_of(run_dir) == archive_of(tmp_path / "reference" / "run"), told
    recorded = [e["node_id"] for e in events(run_dir) if e["event"] == "node_recorded"]
    assert all(recorded.count(n) == 1 for n in recorded), told  # no node counted twice
    committed = [e["node_id"] for e in events(run_dir) if e["event"] == "meta_done"]
    assert sorted(committed) == ["1", "2", "3"], told  # no meta agent redone once its change was committed
    # The same calls, and each repeat a call that a kill caught in flight: after the k-th kill, the
    # calls asked again are at most the rows in flight then, of a meta agent at most its one call.
    assert {c.key for c in gate.calls} == asked, told
    again = []
    for k in range(1, CHAOS_KILLS + 1):
        before = {c.key for c in gate.calls if c.attempt <= k}
        repeats = [c for c in gate.calls if c.attempt == k + 1 and c.key in before]
        again.append((len(repeats), sum(c.meta for c in repeats)))
    told += f"; paid again after each kill (calls, of them the meta agent's): {again}"
    assert sum(n for n, _ in again) == gate.count() - total, told  # no call asked twice within a start
    assert all(n <= workers * parallel and meta <= parallel for n, meta in again), told
    print(told)


def selector(returns: str) -> dict:
    code = f"def select_next_parent(archive):\n    return {returns}\n"
    return {"tool_name": "editor", "tool_input": {"command": "create", "path": "/workspace/select_next_parent.py",
                                                  "file_text": code}}


@pytest.mark.e2e
def test_the_agents_own_parent_selection_is_used_and_a_bad_one_falls_back(tmp_path, fake_openai):
    script = {1: [IMPROVE, selector('"initial"')], 2: [selector('"no-such-node"')], 3: []}
    fake_openai.set_responder(responder(script, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "3", "--parent_selection", "best",
                 "--edit_select_parent", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert found["1"]["status"] == "ok" and found["2"]["parent"] == "initial"  # node 1's selector chose
    assert found["2"]["status"] == "ok"  # its task agent is the initial one: results reused
    assert task_calls(run_dir, "2") == 0
    assert found["3"]["parent"] == "1"  # node 2's selector failed: the configured `best` chose
    fallbacks = [e for e in events(run_dir) if e["event"] == "selection_fallback"]
    assert len(fallbacks) == 1 and "no-such-node" in fallbacks[0]["reason"]


@pytest.mark.e2e
def test_the_budget_stops_the_run_cleanly_and_a_resume_finishes_it(tmp_path, fake_openai):
    fake_openai.set_responder(responder({}, []))
    # $1000 per 1M tokens: a row of about 1,000 tokens costs about $1.
    config = loop_config(tmp_path, gateway="  prices: {openai/fake: [1000.0, 1000.0]}\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--budget_usd", "5", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stopped: budget exhausted" in r.stdout and "--resume_from" in r.stdout
    run_dir = tmp_path / "out" / "run"
    assert nodes(run_dir)["initial"]["status"] == "budget_stopped"
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--budget_usd", "1000", env=cli_env(fake_openai),
                timeout=600)  # its prices are not the folder's to decide: the resume names the flag that accepts them
    assert r.returncode == 2 and "pass --set gateway.prices='{\"openai/fake\": [1000.0, 1000.0]}' to accept it" \
        in r.stderr, r.stderr[-3000:]
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--budget_usd", "1000", "--config", config,
                env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(run_dir)
    assert found["initial"]["status"] == "ok" and found["initial"]["full_eval"] == {"imo_grading": True}
    assert set(found) == {"initial", "1"}
    # Nothing was asked twice: 40 task rows (10 staged, 10 more train, 20 val) and one meta call,
    # besides the one-line check of each model every start makes.
    preflights = sum(1 for r in fake_openai.requests
                     if ((r.get("json") or {}).get("messages") or [{}])[-1].get("content") == "Reply with OK.")
    assert preflights == 2 * 2 and fake_openai.count - preflights == 40 + 1


@pytest.mark.e2e
@pytest.mark.parametrize("baseline", [None, "no_selfimprove"])
def test_the_meta_agent_improves_itself_unless_frozen_and_the_final_test_scores_the_chosen_node_once(
        baseline, tmp_path, fake_openai):
    meta_calls = []
    fake_openai.set_responder(responder({1: [IMPROVE, MUTATE_META]}, meta_calls))
    extra = ["--run_baseline", baseline] if baseline else []
    r = run_loop(tmp_path, fake_openai, "--max_generation", "2", "--parent_selection", "best", "--final_test",
                 *extra, config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert found["1"]["status"] == "ok" and found["1"]["patch"]["dropped"] == []
    # No node record holds a test score: the test split is the final test's alone.
    assert found["1"]["samples"]["imo_grading"] == {"train": 20, "val": 20}
    final = json.loads((run_dir / "final_test.json").read_text())
    assert final["best"] == "1" and final["chosen_on"] == "val"
    assert final["nodes"]["1"]["imo_grading"]["score"] == 1.0 and final["nodes"]["1"]["imo_grading"]["rows"] == 20
    assert final["nodes"]["initial"]["imo_grading"]["score"] < 1.0
    assert "final test: node 1 (chosen on val) imo_grading/test=1.000" in r.stdout
    def graded() -> int:
        return sum("## Student's answer" in json.dumps(e["json"]) for e in fake_openai.requests)

    calls = graded()
    again = run_cli("run_optimization", "--resume_from", str(run_dir), "--final_test", env=cli_env(fake_openai))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "final test: node 1 (chosen on val)" in again.stdout
    assert graded() == calls  # once: the same node's test evaluation is reused, not paid again
    # Generation 2 starts from node 1, whose meta agent rewrote its own prompt: it runs
    # with that prompt, except in the baseline, where the initial meta agent runs.
    assert found["2"]["parent"] == "1"
    second_run = [r for r in meta_calls if not any(m["role"] == "assistant" for m in r["messages"])][1]
    opening = " ".join(str(m["content"]) for m in second_run["messages"][:2])
    assert ("MUTATED META PROMPT" in opening) == (baseline is None)


@pytest.mark.parametrize("printed", ["[" * 100_000 + "]" * 100_000, '["1"]', '{"node_id": "1"}', "1", "",
                                     "not json", '"no-such-node"', "\x00" * 10])
def test_what_the_agents_selector_prints_is_read_as_untrusted_data(printed):
    from optimizer.beginning import chosen_parent

    chosen, problem = chosen_parent("log line\n" + printed, {"1", "initial"})
    assert chosen is None and problem and len(problem) < 400
    assert chosen_parent('log line\n"1"\n', {"1", "initial"}) == ("1", None)
