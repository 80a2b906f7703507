"""The Python API (hyperagents.py): the example of its page (docs/api.md) run as it is, against the fake provider,
and the command line's guarantees kept (one-line UserError, no folder made, the lock let go)."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from services.errors import UserError
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from support.docs import DOCS, section


def api_example() -> str:
    """The first example of the Python API page (docs/api.md)."""
    return re.search(r"```python\n(.*?)```", section(DOCS / "api.md", "Python API"), re.S).group(1)


@pytest.mark.e2e
def test_the_docs_example_runs_and_reads_its_run_back(tmp_path, fake_openai):
    code = api_example()
    assert len(code.strip().splitlines()) <= 12
    fake_openai.responder = lambda request: '<json>{"response": "incorrect"}</json>'  # some rows right: on to val
    env = cli_env(fake_openai, PYTHONPATH=str(REPO_ROOT))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["name"] == "first try" and record["tags"] == ["demo"]
    assert record["config"]["loop"]["promotion"] == "not_worse_than_parent"
    assert record["config"]["loop"]["max_generation"] == 1
    assert record["config"]["models"]["task"] == "openai/gpt-4o-mini"
    assert "finished" in (run_dir / "report.html").read_text()  # the API hands the loop its pictures, as the CLI does
    lines = r.stdout.splitlines()
    assert any(line.startswith("finished $") and " initial {'train': Score(value=" in line for line in lines), r.stdout
    nodes = [line for line in lines if re.match(r"(initial None 0|1 initial 1) ", line)]
    assert len(nodes) == 2 and "Spend(cost_usd=" in nodes[0]
    evaluations = json.loads((run_dir / "evaluations.json").read_text())["nodes"]["initial"]["imo_grading"]["test"]
    assert f"{evaluations['score']} 10 ({evaluations['interval'][0]}, {evaluations['interval'][1]})" in r.stdout

    from hyperagents import load_run

    view = load_run(run_dir)
    assert view.state == "finished" and view.domains == ("imo_grading",) and view.name == "first try"
    assert list(view.nodes) == ["initial", "1"] and view.nodes["1"].parent == "initial"
    val = view.nodes["initial"].scores["imo_grading"]["val"]
    assert val.rows == 10 and val.interval[0] <= val.value <= val.interval[1]
    assert view.cost_usd > 0 and view.tokens > 0 and set(view.spend) >= {"meta", "task"}
    assert view.best is not None and view.best.id == "initial"

    # the lock was let go when run() returned: the command line resumes the run
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--config", str(config), env=cli_env(fake_openai),
                timeout=600)  # the run's own models and folder: a resume refuses others
    assert r.returncode == 0 and "in use by another process" not in r.stderr, r.stderr


@pytest.mark.e2e
def test_load_run_reads_a_run_while_it_runs_without_holding_it_up(tmp_path, fake_openai):
    from hyperagents import load_run

    fake_openai.responder = lambda request: '<json>{"response": "incorrect"}</json>'
    fake_openai.latency = 0.2
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 6\n")
    run_dir = tmp_path / "out" / "run"
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", "--domain", "imo_grading", "--output_dir",
                             str(tmp_path / "out"), "--run_id", "run", "--task_model", "openai/fake", "--meta_model",
                             "openai/fake-meta", "--config", str(config), "--max_generation", "1", "--name", "live"],
                            cwd=REPO_ROOT, env=cli_env(fake_openai), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    try:
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline:
            if (run_dir / "run.json").exists():
                view = load_run(run_dir)
                seen.append((view.state, len(view.nodes), view.best is not None))
            time.sleep(0.2)
    finally:
        proc.kill() if proc.poll() is None else None
        stderr = proc.communicate()[1]
    assert proc.returncode == 0, stderr
    # Between run.json and the loop's first state a reader may see the run "not started"; never after.
    states = [state for state, _, _ in seen]
    assert states and set(states[:states.index("running")]) <= {"not started"} and ("running", 0, False) in seen
    assert "not started" not in states[states.index("running"):]
    assert any(state == "running" and nodes == 1 and best for state, nodes, best in seen)
    view = load_run(run_dir)
    assert view.state == "finished" and view.name == "live" and list(view.nodes) == ["initial", "1"]


@pytest.mark.e2e
def test_run_takes_a_domain_spec_in_process(tmp_path, fake_openai, monkeypatch):
    from hyperagents import run

    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-secret-0123456789")
    fake_openai.responder = lambda request: "Paris"
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    view = run(domain_spec=REPO_ROOT / "examples" / "capitals" / "capitals.yaml", config=config, output_dir=tmp_path,
               run_id="r", max_generation=0, eval_samples=4, task_model="openai/fake", meta_model="openai/fake-meta",
               tags=["spec"])
    assert view.path == tmp_path / "r" and view.domains == ("capitals",) and view.tags == ("spec",)
    assert (tmp_path / "r" / "domain_specs" / "capitals.json").is_file()
    train = view.nodes["initial"].scores["capitals"]["train"]
    assert train.rows and 0 <= train.value <= 1 and view.spend["task"].tokens > 0


def test_bad_input_raises_the_command_lines_one_line_error_and_makes_nothing(tmp_path, fake_openai, monkeypatch):
    from hyperagents import evaluate, load_run, run

    out = tmp_path / "out"
    for call, expected in [
        (lambda: run("imo_grading", output_dir=out, settings={"loop.nope": 1}),
         "--set loop.nope: unknown config key loop.nope"),
        (lambda: run("imo_grading", output_dir=out, max_generation=-1),
         "loop.max_generation must be 0 or more, got -1"),
        (lambda: run("imo_grading", output_dir=out, max_generations=2), "unknown option 'max_generations'"),
        (lambda: run("imo_grading", output_dir=out, config={"loop": {"seed": "x"}}),
         "config: loop.seed must be an integer or null"),
        (lambda: run("no_such_domain", output_dir=out), "unknown domain"),
        (lambda: run("imo_grading", output_dir=out, name="bad\nname"), "--name 'bad\\nname': holds a control"),
        (lambda: run(resume_from=tmp_path), "--resume_from"),
        (lambda: load_run(tmp_path), "not a run folder (no run.json)"),
        (lambda: evaluate("task_agent", None), "evaluate: name the domain"),
        (lambda: evaluate("task_agent", "imo_grading", output_dir=out, nope=1), "evaluate: unknown option nope"),
    ]:
        with pytest.raises(UserError) as e:
            call()
        assert expected in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not out.exists()


@pytest.mark.e2e
def test_evaluate_runs_a_task_agent_on_a_split_and_scores_it(tmp_path, fake_openai, monkeypatch):
    from hyperagents import evaluate

    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-secret-0123456789")
    fake_openai.responder = lambda request: '<json>{"response": "incorrect"}</json>'
    result = evaluate("task_agent", "imo_grading", "_filtered_100_val", output_dir=tmp_path, run_id="e",
                      num_samples=6, model="openai/fake", settings={"sandbox.backend": "bwrap"})
    predictions = (tmp_path / "e" / "predictions.csv").read_text().splitlines()
    assert result.folder == tmp_path / "e" and len(predictions) > 6
    report = json.loads((tmp_path / "e" / "report.json").read_text())
    assert result.score.value == report["overall_accuracy"] and result.score.rows == 6
    low, high = result.score.interval
    assert 0 <= low <= result.score.value <= high <= 1 and high - low > 0.1  # six rows: a wide interval


def test_the_package_exposes_the_api_module():
    text = (REPO_ROOT / "pyproject.toml").read_text()
    assert '"hyperagents"' in text.split("py-modules", 1)[1].splitlines()[0]
    r = subprocess.run([sys.executable, "-c", "import hyperagents; print(hyperagents.__all__)"], cwd="/",
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True)
    assert "'run'" in r.stdout and "'load_run'" in r.stdout and "'evaluate'" in r.stdout


def test_every_error_the_api_raises_is_an_exception_of_one_base():
    import hyperagents
    from services.errors import MachineDown, ProviderDown, api_errors

    @api_errors
    def fails(down):
        raise down

    for down, kind in ((ProviderDown("openai/x: 503 three times", tmp := "RUN"), hyperagents.ProviderDown),
                       (MachineDown("the disk under RUN is full", tmp), hyperagents.MachineDown)):
        with pytest.raises(kind) as raised:
            fails(down)
        assert isinstance(raised.value, Exception) and isinstance(raised.value, hyperagents.Error)
        assert raised.value.__cause__ is down and raised.value.line() == down.line() == str(raised.value)
        assert raised.value.reason == down.reason and raised.value.folder == tmp
    assert not issubclass(hyperagents.ProviderDown, hyperagents.MachineDown)
    assert issubclass(hyperagents.UserError, hyperagents.Error) and issubclass(hyperagents.Error, Exception)


@pytest.mark.e2e
def test_a_providers_outage_reaches_the_caller_as_an_exception(tmp_path, fake_openai, monkeypatch):
    import hyperagents

    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-secret-0123456789")
    fake_openai.responder = lambda request: '<json>{"response": "incorrect"}</json>'
    fake_openai.add_faults(["503"] * 200)
    settings = {"sandbox.backend": "bwrap", "gateway.breaker_failures": 2, "gateway.max_retries": 0,
                "gateway.backoff_base_s": 0.01, "gateway.backoff_max_s": 0.02}
    try:
        hyperagents.evaluate("task_agent", "imo_grading", "_filtered_100_val", output_dir=tmp_path, run_id="e",
                             num_samples=4, model="openai/fake", settings=settings, num_workers=1)
    except Exception as e:  # what a caller's `except Exception` sees
        assert isinstance(e, hyperagents.ProviderDown) and "openai/fake" in str(e), repr(e)
    else:
        raise AssertionError("the outage did not reach the caller")


def test_plan_returns_what_the_dry_run_prints_and_makes_nothing(tmp_path):
    from hyperagents import plan

    flags = {"max_generation": 3, "eval_samples": 20, "task_model": "openai/gpt-4o-mini",
             "meta_model": "openai/gpt-4o-mini"}
    found = plan("imo_grading", output_dir=tmp_path / "out", run_id="r", sandbox="none",
                 settings={"loop.promotion": "sica"}, **flags)
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "r",
                "--sandbox", "none", "--set", "loop.promotion=sica", "--dry_run",
                *(f"--{k}={v}" for k, v in flags.items()), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.rstrip("\n") == found.text()  # the command prints the plan the API returns
    assert found.lines[0].startswith("run ") and found.backend == "none" and found.run_dir == tmp_path / "out" / "r"
    assert found.estimate.generations == 3 and found.estimate.run_usd > 0
    assert any("loop.promotion sica" in line for line in found.lines)
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="unknown option 'max_generations'"):
        plan("imo_grading", output_dir=tmp_path / "out", max_generations=2)
