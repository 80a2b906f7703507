"""The paper's experiments as commands, end to end against the fake OpenAI server: a run started
from another run's node (--initial_from, --transfer), replicates into one folder (--replicates),
promotion rules that compare a child with its parent, and the analysis of groups of runs."""

import csv
import json
import os
import sqlite3
from pathlib import Path

import pytest

from support.cli import cli_env, run_cli, run_loop
from support.scripted_loop import IMPROVE, MUTATE_META, loop_config, nodes, responder

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

WORSE = {"tool_name": "bash", "tool_input": {
    "command": "sed -i 's/You are an expert grader/ANSWER-ALMOST You are an expert grader/' "
               "/workspace/task_agent/task_agent.py"}}


def meta_openings(requests: list) -> list[str]:
    """The opening of each meta agent run, in order."""
    return [" ".join(str(m["content"]) for m in r["messages"][:2]) for r in requests
            if not any(m["role"] == "assistant" for m in r["messages"])]


@pytest.fixture
def source_run(tmp_path_factory, fake_openai):
    """A run whose node 1 has an improved task agent and a rewritten meta agent prompt."""
    tmp = tmp_path_factory.mktemp("source")
    fake_openai.set_responder(responder({1: [IMPROVE, MUTATE_META]}, []))
    r = run_loop(tmp, fake_openai, "--max_generation", "1", config=loop_config(tmp))
    assert r.returncode == 0, r.stderr[-3000:]
    fake_openai.reset()
    return tmp / "out" / "run"


def test_transfer_experiment_end_to_end_ensemble_transfer_and_analysis(tmp_path, fake_openai, source_run):
    """The paper's transfer experiment in small: a source run; an ensemble over its archive, which pays
    no call; a run from its meta agent (--transfer meta) beside one with the initial meta agent; their
    analysis with imp@k and a p-value; --transfer all keeps the task agent too."""
    from support.scripted_loop import TRUTH

    calls, ledger_rows = fake_openai.count, ledger_count(source_run)
    r = run_cli("apps.ensemble", str(source_run), "--split", "val", "--top", "2")
    assert r.returncode == 0, r.stderr
    assert fake_openai.count == calls and ledger_count(source_run) == ledger_rows
    members = json.loads((source_run / "ensembles" / "val-majority-top2" / "members.json").read_text())
    assert [m["node"] for m in members["members"]] == ["1", "initial"] and members["rows"] == 20
    assert members["score"] == 1.0  # every tie goes to node 1, right everywhere

    meta_calls = []
    fake_openai.set_responder(responder({1: [IMPROVE]}, meta_calls))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--initial_from", f"{source_run}:1",
                 "--transfer", "meta", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    assert f"agent    meta agent of node 1 of {source_run}, task agent default" in r.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["initial_from"]["node"] == "1" and record["initial_from"]["keep"] == "meta"
    assert record["initial_from"]["run"] == str(source_run)
    # The task agent is the initial one again (it does not score 1.0); the meta agent that runs is node 1's.
    transfer = nodes(run_dir)
    assert transfer["initial"]["scores"]["imo_grading"]["val"] < 1.0
    assert "MUTATED META PROMPT" in meta_openings(meta_calls)[0]

    fake_openai.set_responder(responder({}, []))  # the initial meta agent, which here changes nothing
    fixed_dir = tmp_path / "fixed"
    r = run_loop(fixed_dir, fake_openai, "--max_generation", "1", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("apps.analyze", "--label", f"transfer={run_dir},fixed={fixed_dir / 'out' / 'run'}", "--k", "1",
                "--out", str(tmp_path / "analysis"))
    assert r.returncode == 0, r.stderr
    rows = {(x["group"], x["metric"]): x for x in csv.DictReader((tmp_path / "analysis" / "analysis.csv").open())}
    gain = transfer["1"]["scores"]["imo_grading"]["val"] - transfer["initial"]["scores"]["imo_grading"]["val"]
    assert gain > 0 and float(rows[("transfer", "imp@1")]["value"]) == pytest.approx(gain)
    assert float(rows[("fixed", "imp@1")]["value"]) == 0.0
    assert float(rows[("transfer vs fixed", "p:imp@1")]["value"]) == 1.0  # one run each: 2 relabelings
    # Row by row, the best nodes differ on the val rows not labeled Incorrect (all right vs all "incorrect"):
    # an exact two-sided sign test, 2 * (1/2)**d.
    val = [TRUTH[a] for a in json_rows(run_dir, transfer["1"]["eval_keys"]["imo_grading"]["val"])]
    d = sum(label != "Incorrect" for label in val)
    p = rows[("transfer vs fixed", "p:rows:imo_grading/val")]
    assert int(p["n"]) == 20
    assert float(p["value"]) == pytest.approx(min(1.0, 2 * 0.5 ** d), abs=1e-6)  # the csv keeps 6 places

    r = run_loop(tmp_path / "all", fake_openai, "--max_generation", "0", "--initial_from", str(source_run),
                 "--transfer", "all", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert nodes(tmp_path / "all" / "out" / "run")["initial"]["scores"]["imo_grading"]["val"] == 1.0  # the best node


def ledger_count(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]


def json_rows(run_dir: Path, key: str) -> list[str]:
    """The graded responses of an evaluation's rows, in order."""
    import pandas as pd

    return [r.strip() for r in pd.read_csv(run_dir / "evals" / key / "predictions.csv")["Response"]]


def test_an_ensemble_over_all_rows_evaluates_the_missing_members_once(fake_openai, source_run):
    """--rows all on test: neither node has test predictions, so both are evaluated first (20 rows
    each, with the run's command); again, or on val where both were evaluated, it pays nothing."""
    fake_openai.set_responder(responder({}, []))  # task prompts graded as in the source run
    calls = fake_openai.count
    r = run_cli("apps.ensemble", str(source_run), "--split", "test", "--top", "2", "--rows", "all",
                env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "evaluating nodes 1, initial on imo_grading/test first" in r.stdout
    assert fake_openai.count - calls == 41  # 20 test rows per node, and one tiny call checking the task model
    evaluated = json.loads((source_run / "evaluations.json").read_text())["nodes"]
    assert {n: e["imo_grading"]["test"]["rows"] for n, e in evaluated.items()} == {"1": 20, "initial": 20}
    assert evaluated["1"]["imo_grading"]["test"]["score"] == 1.0  # node 1 grades right everywhere
    members = json.loads((source_run / "ensembles" / "test-majority-top2" / "members.json").read_text())
    assert members["rows"] == 20 and [m["node"] for m in members["members"]] == ["1", "initial"]
    assert not any(n.get("full_eval", {}).get("test") for n in nodes(source_run).values())  # no node record changed
    for split in ("test", "val"):
        calls = fake_openai.count
        r = run_cli("apps.ensemble", str(source_run), "--split", split, "--top", "2", "--rows", "all",
                    env=cli_env(fake_openai))
        assert r.returncode == 0 and "evaluating" not in r.stdout and fake_openai.count == calls, r.stderr[-2000:]
    r = run_cli("run_optimization", "--resume_from", str(source_run), "--evaluate", "1,99", "--split", "test",
                env=cli_env(fake_openai))
    assert r.returncode == 2 and r.stderr.strip() == "error: --evaluate 99: the run has no such node"
    for empty in ("", ","):  # no node named is refused, not taken for a resumed loop
        r = run_cli("run_optimization", "--resume_from", str(source_run), "--evaluate", empty, "--split", "test",
                    env=cli_env(fake_openai))
        assert r.returncode == 2 and r.stderr.strip() == "error: --evaluate: name at least one node", r.stderr
    assert fake_openai.count == calls  # refused before any call


BAD_FLAGS = [
    (["--initial_from", "/no/such/run"], "--initial_from /no/such/run: no such folder"),
    (["--initial_from", "{source}:99"], "the run has no node '99'"),
    (["--transfer", "meta"], "--transfer needs --initial_from"),
    (["--initial_from", "{source}", "--transfer", "all", "--initial_agent", "proofautograder"],
     "--initial_agent has no effect with --transfer all"),
    (["--eval_test"], "--eval_test is gone"),
]


def test_bad_experiment_flags_are_one_line_errors(tmp_path, fake_openai, source_run):
    for args, message in BAD_FLAGS:  # one source run for all cases: building it is the slow part
        args = [a.replace("{source}", str(source_run)) for a in args]
        r = run_loop(tmp_path, fake_openai, *args, config=loop_config(tmp_path))
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1, args
        assert not (tmp_path / "out" / "run").exists(), args  # a refused run leaves no folder


def test_not_worse_than_parent_stops_a_child_the_paper_s_rule_promotes(tmp_path, fake_openai):
    """The child answers `almost` to everything: above 0 on the first 10 rows, so the paper's rule
    evaluates it in full, but worse than its parent on the rows both ran."""
    def respond(request):
        user = str(request["messages"][-1]["content"])
        if "ANSWER-ALMOST" in user and "## Student's answer" in user:
            return '<json>{"response": "almost"}</json>'
        return base(request)

    base = responder({1: [WORSE]}, [])
    fake_openai.set_responder(respond)
    found = {}
    for rule in ("score_above", "not_worse_than_parent"):
        (tmp_path / rule).mkdir()
        config = loop_config(tmp_path / rule)
        with open(config, "a") as f:
            # racing off: the paper's rule must evaluate the worse child in full (racing would stop it on val)
            f.write(f"  promotion: {rule}\n  promotion_level: 0.2\n  racing: false\n")
        r = run_loop(tmp_path / rule, fake_openai, "--max_generation", "1", config=config)
        assert r.returncode == 0, r.stderr[-3000:]
        found[rule] = (nodes(tmp_path / rule / "out" / "run")["1"], r.stdout)
        base = responder({1: [WORSE]}, [])  # the next run's meta agent starts its script again
    paper, stdout = found["score_above"]
    assert paper["full_eval"] == {"imo_grading": True}
    assert paper["screening"]["imo_grading"][0].startswith("10 rows: on: ")
    child, stdout = found["not_worse_than_parent"]
    assert child["full_eval"] == {"imo_grading": False} and child["samples"]["imo_grading"] == {"train": 10}
    line = child["screening"]["imo_grading"][0]
    assert line.startswith("10 rows: stopped: ") and "p=" in line and "parent" in line
    assert f"imo_grading {line}" in stdout
    # Every score carries its interval and rows.
    low, high = child["intervals"]["imo_grading"]["train"]
    assert low <= child["scores"]["imo_grading"]["train"] <= high


def test_replicates_run_into_one_folder_and_resume_together(tmp_path, fake_openai, monkeypatch):
    fake_openai.set_responder(responder({}, []))
    config = os.path.relpath(loop_config(tmp_path), tmp_path)  # relative: each replicate reads it where this did
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"),
                "--run_id", "group", "--task_model", "openai/fake", "--meta_model", "openai/fake-meta",
                "--config", config, "--max_generation", "0", "--replicates", "2", "--seed", "5",
                "--sandbox", "none", env=cli_env(fake_openai), cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    group_dir = tmp_path / "out" / "group"
    group = json.loads((group_dir / "group.json").read_text())
    assert group["runs"] == ["seed-5", "seed-6"] and group["seeds"] == [5, 6]
    assert "--replicates" not in group["argv"] and "--seed" not in group["argv"]
    for name, seed in (("seed-5", 5), ("seed-6", 6)):
        record = json.loads((group_dir / name / "run.json").read_text())
        assert record["config"]["loop"]["seed"] == seed
        assert os.listdir(group_dir / name / "nodes") == ["initial"]  # --max_generation 0 reached each replicate
    assert "[seed-5] " in r.stdout and "[seed-6] " in r.stdout
    assert f"{group_dir}: 2 replicates, seeds 5, 6, 1 at once" in r.stdout  # the local executor: one at a time
    assert f"analyze: python -m apps.analyze {group_dir}" in r.stdout
    # A replicate killed before it began starts on resume; the finished one resumes and pays nothing.
    import shutil

    shutil.rmtree(group_dir / "seed-6")
    calls = fake_openai.count
    # The group read a config file and ran outside any sandbox: its resume must give both again (the
    # flags the Ctrl-C line adds), and every replicate, started or not, runs with them.
    from run_optimization import build_parser, group_accepting_flags

    r = run_cli("run_optimization", "--resume_from", str(group_dir), env=cli_env(fake_openai), cwd=tmp_path,
                timeout=600)
    assert r.returncode == 2 and "pass the same --config to accept it" in r.stderr, r.stderr[-3000:]
    assert fake_openai.count == calls and not (group_dir / "seed-6").exists()
    monkeypatch.chdir(tmp_path)  # where the group was started: its --config is relative to it
    again = group_accepting_flags(build_parser(), group["argv"])
    assert again == ["--config", config, "--sandbox", "none"]
    r = run_cli("run_optimization", "--resume_from", str(group_dir), *again, env=cli_env(fake_openai),
                cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    assert (group_dir / "seed-6" / "nodes" / "initial" / "node.json").exists()
    assert "[seed-5] " in r.stdout and "asks for" not in r.stdout  # the started replicate resumed with the flag
    assert fake_openai.count > calls


def test_dry_run_prints_the_plan_and_the_estimate_and_starts_nothing(tmp_path, fake_openai):
    r = run_loop(tmp_path, fake_openai, "--max_generation", "3", "--final_test", "--replicates", "4", "--seed", "2",
                 "--dry_run", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "dry run: nothing started" and any(x.startswith("loop     3 generations") for x in lines)
    run_usd = float(next(x for x in lines if x.startswith("estimate ~$")).split("$")[1].split()[0])
    group = next(x for x in lines if x.startswith("group    "))
    assert "4 replicates, seeds 2 to 5" in group and f"~${4 * run_usd:.2f} in all" in group
    assert fake_openai.count == 0 and not (tmp_path / "out").exists()  # no call, no folder


def test_a_forged_group_file_is_refused(tmp_path):
    group_dir = tmp_path / "group"
    group_dir.mkdir()
    (group_dir / "group.json").write_text(json.dumps({"schema_version": 1, "runs": ["../../etc"], "seeds": [1],
                                                     "argv": ["--domain", "imo_grading"]}))
    r = run_cli("run_optimization", "--resume_from", str(group_dir))
    assert r.returncode == 2 and "not a group of replicates the run wrote" in r.stderr
    assert not Path(tmp_path / "etc").exists()


def test_a_paired_best_choice_keeps_the_initial_node_until_a_child_is_significantly_better(
        tmp_path, fake_openai, source_run):
    """The source run's node 1 scores higher on val, so the paper's choice calls it best; at a level no
    val set of this size can reach, the paired choice keeps the initial node, and the final test follows."""
    from archive.run_groups import load_groups

    assert load_groups([str(source_run)], [])[0].runs[0].best().node_id == "1"
    fake_openai.set_responder(responder({1: [IMPROVE, MUTATE_META]}, []))
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("  best_choice: paired\n  best_level: 0.000001\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--final_test", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "out" / "run"
    scores = {n: v["scores"]["imo_grading"]["val"] for n, v in nodes(run).items()}
    assert scores["1"] > scores["initial"]  # the same child as the source run's
    assert "best node initial (generation 0, chosen by paired tests at level 1e-06)" in r.stdout
    assert json.loads((run / "final_test.json").read_text())["best"] == "initial"
    assert load_groups([str(run)], [])[0].runs[0].best().node_id == "initial"


def test_a_run_another_process_holds_is_refused_before_any_call(fake_openai, source_run):
    """A loop or an --evaluate already writing the run holds it: a second one is one line, pays nothing,
    and the run can be used again once the holder is gone (its lock dies with it, even on kill -9)."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import sys; from services.fsutil import hold_folder; "
                               f"hold_folder({str(source_run)!r}, 'run'); print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    calls = fake_openai.count
    for args in (["--evaluate", "1", "--split", "test"], ["--max_generation", "2"]):
        r = run_cli("run_optimization", "--resume_from", str(source_run), *args, env=cli_env(fake_openai))
        assert r.returncode == 2 and r.stderr.strip() == (
            f"error: {source_run}: the run is in use by another process (pid {holder.pid}); "
            "wait for it to end or stop it, then rerun"), r.stderr[-2000:]
    assert fake_openai.count == calls
    holder.kill()
    holder.wait()
    fake_openai.set_responder(responder({}, []))
    r = run_cli("run_optimization", "--resume_from", str(source_run), "--evaluate", "initial", "--split", "test",
                env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((source_run / "evaluations.json").read_text())["nodes"]["initial"]["imo_grading"]["test"]


def test_replicates_run_all_at_once_on_a_ray_cluster_however_the_executor_is_named(tmp_path):
    from run_optimization import build_parser, replicates_at_once

    config = tmp_path / "ray.yaml"
    config.write_text("sandbox:\n  executor: ray\n")
    base = ["--domain", "imo_grading"]
    assert replicates_at_once(build_parser(), base, 3) == 1
    for ray in (["--executor", "ray"], ["--set", "sandbox.executor=ray"], ["--config", str(config)]):
        assert replicates_at_once(build_parser(), base + ray, 3) == 3, ray
