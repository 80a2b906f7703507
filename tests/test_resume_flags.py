"""On --resume_from every flag counts or is refused in one line (optimizer/launch.py resume_config,
archive/run_folder.py settle_resume): what a run is measured with and what is read only at its start cannot change
on a resume; the rest (--max_generation lower or higher, the budget, the loop's knobs) counts from the resume on;
--config and --preset count on a resume only for where code runs and data goes, and what else they ask for is
named in a note."""

import json
import time

import pytest

from archive.records import RunRecord
from archive.run_folder import FIXED_ON_RESUME, settle_resume
from services.config import Config
from services.errors import UserError
from services.fsutil import atomic_write_json
from support.cli import cli_env, run_cli
from support.scripted_loop import events, loop_config, nodes, responder, start_and_kill_when
from support.small_runs import write_run

RUN_CONFIG = {"models": {"task": "openai/fake", "meta": "openai/fake-meta", "grader": "openai/fake",
                         "judge": "openai/fake"},
              "loop": {"seed": 1, "eval_samples": 20, "max_generation": 2}, "sandbox": {"backend": "bwrap"}}


def a_run(tmp_path):
    """A run folder of three scored nodes whose run.json holds RUN_CONFIG, as a run writes it (models resolved)."""
    run = write_run(tmp_path / "out" / "run", 1, [0.5, 0.6, 0.7])
    atomic_write_json(run / "run.json", RunRecord(["imo_grading"], RUN_CONFIG, "bwrap").to_dict())
    return run


def listing(folder) -> dict:
    return {str(p.relative_to(folder)): p.lstat().st_mtime_ns for p in folder.rglob("*")}


REFUSED = [
    (["--domain", "imo_proof"], "--domain imo_proof: a resume keeps the run's domains (imo_grading); for others, "
                                "start a new run (--initial_from {run} starts it from this run's best node)"),
    (["--domain", "imo_grading", "imo_proof"], "--domain imo_grading imo_proof: a resume keeps the run's domains"),
    (["--task_model", "openai/other"], "--task_model openai/other: a resume cannot change models.task (the run's: "
                                       "openai/fake): every node of the run was scored with it; for another, start a "
                                       "new run (--initial_from {run} starts it from this run's best node)"),
    (["--set", "models.grader=openai/other"], "--set models.grader=openai/other: a resume cannot change models.grader"),
    (["--eval_samples", "5"], "--eval_samples 5: a resume cannot change loop.eval_samples (the run's: 20): every "
                              "node of the run was scored on that many rows"),
    (["--set", "loop.eval_samples=-1"], "--set loop.eval_samples=-1: a resume cannot change loop.eval_samples"),
    (["--seed", "3"], "--seed 3: a resume cannot change loop.seed (the run's: 1): the run's parent choices replay "
                      "from it"),
    (["--run_baseline", "no_archive"], "--run_baseline no_archive: a resume cannot change loop.run_baseline (the "
                                       "run's: None): the run measures that baseline"),
    (["--initial_agent", "proofautograder"], "--initial_agent proofautograder: a resume cannot change "
                                             "loop.initial_agent (the run's: default): it is read when a run starts"),
    (["--set", "harness.label_case=exact"], "--set harness.label_case=exact: a resume cannot change "
                                            "harness.label_case"),
    (["--run_id", "another"], "--output_dir and --run_id name a new run's folder; --resume_from continues a run in its "
                              "own folder ({run}): drop them"),
    (["--output_dir", "/tmp"], "--output_dir and --run_id name a new run's folder"),
    (["--replicates_at_once", "2"], "--replicates_at_once goes with --replicates K, or --resume_from a folder of "
                                    "replicates"),
]


@pytest.mark.e2e
@pytest.mark.parametrize("flags, expected", REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_a_flag_a_resume_cannot_take_is_refused_in_one_line_before_anything_starts(tmp_path, fake_openai, flags,
                                                                                 expected):
    run = a_run(tmp_path)
    before = listing(run)
    started = time.monotonic()
    r = run_cli("run_optimization", "--resume_from", str(run), *flags, env=cli_env(fake_openai), timeout=120)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    assert expected.format(run=run) in r.stderr, r.stderr
    assert r.stdout == "" and fake_openai.count == 0  # no plan, no model called, no model server started
    assert listing(run) == before and time.monotonic() - started < 30  # nothing written, not even the lock


@pytest.mark.e2e
def test_the_runs_own_values_and_auto_are_no_change(tmp_path, fake_openai):
    run = a_run(tmp_path)
    r = run_cli("run_optimization", "--resume_from", str(run), "--domain", "imo_grading", "--task_model",
                "openai/fake", "--eval_samples", "20", "--seed", "1", "--set", "models.grader=auto", "--output_dir",
                str(run.parent), "--run_id", "run", "--dry_run", env=cli_env(fake_openai), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "models   task openai/fake, meta openai/fake-meta" in r.stdout and fake_openai.count == 0


@pytest.mark.e2e
def test_a_config_file_on_a_resume_is_named_where_it_is_not_taken(tmp_path, fake_openai):
    run = a_run(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("loop:\n  max_generation: 7\n  parallel: 2\nsandbox:\n  backend: bwrap\n")
    r = run_cli("run_optimization", "--resume_from", str(run), "--config", str(config), "--parallel", "2",
                "--dry_run", env=cli_env(fake_openai), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("note: a resume keeps the run's own loop.max_generation 2 where --config or --preset ask for 7 (on a "
            "resume they decide where code runs and data goes; --set or a flag changes the rest)") in r.stdout
    assert "loop     2 generations, parent selection score_child_prop, seed 1, 2 in flight" in r.stdout


def test_a_model_given_as_auto_keeps_the_runs_and_the_time_limit_is_the_commands_alone():
    run = Config.from_dict(RUN_CONFIG | {"loop": {**RUN_CONFIG["loop"], "max_minutes": 30}})
    resumed = Config.from_dict(RUN_CONFIG | {"loop": {**RUN_CONFIG["loop"], "max_minutes": 30, "max_generation": 5}})
    resumed.models.task = "auto"
    assert settle_resume(run, resumed, Config(), {}, "RUN") is None
    assert resumed.models.task == "openai/fake" and resumed.loop.max_minutes is None  # none given: no limit
    assert resumed.loop.max_generation == 5
    resumed.models.judge = "openai/other"
    with pytest.raises(UserError, match=r"^--set models.judge=openai/other: a resume cannot change models.judge"):
        settle_resume(run, resumed, Config(), {}, "RUN")
    with pytest.raises(UserError, match=r"^--judge_flag openai/other: "):
        settle_resume(run, resumed, Config(), {"models.judge": "--judge_flag"}, "RUN")
    assert set(FIXED_ON_RESUME) <= {f"{s}.{k}" for s, v in Config().to_dict().items() for k in v}


@pytest.mark.e2e
def test_a_lower_max_generation_leaves_a_generation_in_flight_and_a_higher_one_redoes_it(tmp_path, fake_openai):
    answer, held = responder({}, []), []

    def respond(request: dict) -> str:
        opening = " ".join(str(m["content"]) for m in request["messages"][:2])
        if "Iterations left in this run: 0" in opening and not held:  # generation 2 of 2: kept at work
            held.append(request)
            time.sleep(5)
        return answer(request)

    fake_openai.set_responder(respond)
    run_dir = tmp_path / "out" / "run"
    first = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
             "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", loop_config(tmp_path),
             "--max_generation", "2"]
    start_and_kill_when(tmp_path, fake_openai, first, lambda d: bool(held))  # killed while generation 2 works
    assert set(nodes(run_dir)) == {"initial", "1"}
    assert any(e["event"] == "gen_start" and e["node_id"] == "2" for e in events(run_dir))
    asked = len(fake_openai.requests)

    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--max_generation", "1", env=cli_env(fake_openai),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert ("         1 generation in flight when the run stopped (2) is past --max_generation 1: left as started, for "
            "a resume with a higher --max_generation") in r.stdout.splitlines()
    assert "loop     1 generation, parent selection score_child_prop" in r.stdout and "run finished" in r.stdout
    assert "generations 1 of 1 done" in r.stdout
    assert set(nodes(run_dir)) == {"initial", "1"}
    # Only the check of each model at the start: generation 2 was not redone.
    assert [q["json"]["messages"][-1]["content"] for q in fake_openai.requests[asked:]] == ["Reply with OK."] * 2
    assert json.loads((run_dir / "run.json").read_text())["config"]["loop"]["max_generation"] == 1

    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--max_generation", "3", "--budget_usd", "100",
                env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "in flight when the run stopped" not in r.stdout and "budget   $100" in r.stdout
    assert set(nodes(run_dir)) == {"initial", "1", "2", "3"} and "generations 3 of 3 done" in r.stdout
    saved = json.loads((run_dir / "run.json").read_text())["config"]
    assert saved["loop"]["max_generation"] == 3 and saved["gateway"]["budget_usd"] == 100
