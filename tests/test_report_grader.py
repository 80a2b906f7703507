"""The proof report names its grader's model (on screen and in report.json), and warns when that is the
bundled local model, whose grades mean little (issue 37: 71.4% points for proofs reading `your complete
proof`, graded by the same 135M model that wrote them)."""

import json

import pytest

from domains.report import grader_lines, grader_of
from services.local_model import LOCAL_MODELS
from support.cli import FAST_CONFIG, cli_env, run_cli
from support.proofgrader_runs import baseline_proofgrader

LOCAL = next(iter(LOCAL_MODELS))


def test_a_grade_by_the_local_model_carries_a_warning_and_a_providers_none():
    local = grader_of("proofgrader.task_agent", LOCAL)
    assert local["model"] == LOCAL and "near chance" in local["warning"] and "means little" in local["warning"]
    lines = grader_lines({"points_percentage": 0.714, "grader": local})
    assert lines[0] == f"grader          proofgrader.task_agent, model {LOCAL}"
    assert lines[1].startswith(f"warning: graded by {LOCAL}, the bundled local model")
    provider = grader_of("proofgrader.task_agent", "openai/gpt-4o")
    assert provider["warning"] is None
    assert grader_lines({"grader": provider}) == ["grader          proofgrader.task_agent, model openai/gpt-4o"]
    assert grader_lines({"accuracy": 1.0}) == []  # a report no grader made says nothing of one


@pytest.fixture(scope="module")
def proofgrader_dir(tmp_path_factory):
    return baseline_proofgrader(tmp_path_factory.mktemp("pg"))


@pytest.mark.e2e
@pytest.mark.parametrize("grader", ["openai/fake", LOCAL])
def test_the_proof_report_names_its_graders_model_and_warns_of_the_local_one(tmp_path, fake_openai,
                                                                             proofgrader_dir, grader):
    fake_openai.set_responder(lambda request: '<json>{"response": "your complete proof"}</json>'
                              if "grading a proposed solution" not in str(request["messages"])
                              else "<points>5 out of 7</points>")
    config = tmp_path / "fast.yaml"
    config.write_text(FAST_CONFIG)
    env = cli_env(fake_openai, PYTHONPATH=str(proofgrader_dir))
    out = tmp_path / "out"
    r = run_cli("domains.harness", "--domain", "imo_proof", "--num_samples", "1", "--output_dir", str(out),
                "--run_id", "proofs", "--model", "openai/fake", "--config", str(config), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("domains.report", "--domain", "imo_proof", "--dname", str(out / "proofs"), "--config", str(config),
                "--model", grader, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((out / "proofs" / "report.json").read_text())
    assert report["grader"]["agent"] == "proofgrader.task_agent" and report["grader"]["model"] == grader
    assert f"grader          proofgrader.task_agent, model {grader}" in r.stdout
    if grader == LOCAL:
        assert "means little" in report["grader"]["warning"]
        assert f"warning: graded by {LOCAL}, the bundled local model" in r.stdout
    else:
        assert report["grader"]["warning"] is None and "warning" not in r.stdout
