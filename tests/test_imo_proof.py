"""imo_proof end to end: proofs written by the task agent, graded by a built, importable proofgrader.

The fake provider plays the prover and the grader. The grader (the ProofAutoGrader
baseline, packaged by setup_proofgrader_repo) is given points by problem, so every
number of the report can be computed by hand.
"""

import json
import sqlite3

import pandas as pd
import pytest

from services.config import PROJECT_ROOT
from support.cli import FAST_CONFIG, cli_env, run_cli, run_cli_without, run_loop
from support.proofgrader_runs import baseline_proofgrader

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

PROOFBENCH = pd.read_csv(PROJECT_ROOT / "domains" / "imo" / "data" / "proofbench.csv")
# Points the fake grader gives the proof of each of the first problems (PB-Basic-001..003).
POINTS = {0: 7, 1: 6, 2: 0}
GRADER_PROMPT = "You are grading a proposed solution"


def respond(request: dict) -> str:
    user = str(request["messages"][-1]["content"])
    if GRADER_PROMPT in user:
        for i, problem in enumerate(PROOFBENCH["Problem"].head(len(POINTS))):
            if problem.strip() in user:
                return f"Checked every step.\n<points>{POINTS[i]} out of 7</points>"
        return "<points>0 out of 7</points>"
    if "/workspace" in " ".join(str(m["content"]) for m in request["messages"][:2]):
        return "Done: nothing to change."  # the meta agent
    return '<json>{"response": "A complete proof, step by step."}</json>'


@pytest.fixture(scope="module")
def proofgrader_dir(tmp_path_factory):
    """A proofgrader built from the ProofAutoGrader baseline; importable through PYTHONPATH."""
    return baseline_proofgrader(tmp_path_factory.mktemp("pg"))


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text(FAST_CONFIG + "models:\n  grader: openai/fake\n")
    return str(path)


def test_report_grades_the_proofs_with_the_installed_proofgrader(tmp_path, fake_openai, proofgrader_dir, config):
    fake_openai.set_responder(respond)
    env = cli_env(fake_openai, PYTHONPATH=str(proofgrader_dir))
    out = tmp_path / "out"
    r = run_cli("domains.harness", "--domain", "imo_proof", "--num_samples", "3", "--output_dir", str(out),
                "--run_id", "proofs", "--model", "openai/fake", "--config", config, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("domains.report", "--domain", "imo_proof", "--dname", str(out / "proofs"), "--config", config,
                env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((out / "proofs" / "report.json").read_text())
    # 7 + 6 + 0 points of 21; one proof has full marks.
    assert report["points_percentage"] == pytest.approx(13 / 21)
    assert report["correct_percentage"] == pytest.approx(1 / 3)
    # PB-Basic-001 and 003 are IMO-easy (7 and 0 points), 002 is pre-IMO (6 points).
    assert report["per_level"]["IMO-easy"]["points_percentage"] == pytest.approx(7 / 14)
    assert report["per_level"]["pre-IMO"]["points_percentage"] == pytest.approx(6 / 7)
    assert report["per_category"]["Algebra"]["points_percentage"] == pytest.approx(13 / 21)
    assert report["question_ids_passed"] == ["PB-Basic-001"]
    assert "points" in r.stdout
    # The grader's calls are booked to role grader, in the grading run's own ledger.
    db = sqlite3.connect(out / "proofs" / "gradings" / "ledger.sqlite")
    assert db.execute("SELECT DISTINCT role FROM calls").fetchall() == [("grader",)]


def test_report_without_a_proofgrader_says_how_to_install_one(tmp_path, fake_openai, config):
    fake_openai.set_responder(respond)
    out = tmp_path / "out"
    r = run_cli("domains.harness", "--domain", "imo_proof", "--num_samples", "1", "--output_dir", str(out),
                "--run_id", "proofs", "--model", "openai/fake", "--config", config, env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli_without(("proofgrader",), "domains.report", "--domain", "imo_proof", "--dname", str(out / "proofs"),
                        "--config", config, env=cli_env(fake_openai))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "setup_proofgrader_repo --proofautograder" in r.stderr and "pip install -e ./proofgrader_repo" in r.stderr
    # The loop says so before it starts, not once per node.
    r = run_cli_without(("proofgrader",), "run_optimization", "--domain", "imo_proof", "--output_dir",
                        str(tmp_path / "runs"), "--task_model", "openai/fake", "--meta_model", "openai/fake",
                        env=cli_env(fake_openai))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "pip install -e ./proofgrader_repo" in r.stderr and not (tmp_path / "runs").exists()


VENDOR = {"tool_name": "bash", "tool_input": {"command": (
    "mkdir -p /workspace/proofgrader/task_agent && "
    "printf 'class TaskAgent:\\n    def __init__(self, model=None, chat_history_file=None): pass\\n"
    "    def forward(self, inputs): return \"correct\", []\\n' > /workspace/proofgrader/task_agent/__init__.py && "
    "touch /workspace/proofgrader/__init__.py && echo '# edited' >> /workspace/task_agent/__init__.py")}}


def test_the_loop_on_imo_proof_grades_with_the_installed_grader_not_a_vendored_copy(
        tmp_path, fake_openai, proofgrader_dir, config):
    """Generation 1's meta agent plants a proofgrader in the workspace that calls every proof
    correct (and edits its prover a little); the scores must not move: the planted package is
    outside the evolvable paths, so never committed, and grading runs the installed package."""
    scripted = []

    def respond_with_meta(request: dict) -> str:
        if "/workspace" in " ".join(str(m["content"]) for m in request["messages"][:2]):
            turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
            scripted.append(turn)
            return f"<json>{json.dumps(VENDOR)}</json>" if turn == 0 else "Done."
        return respond(request)

    fake_openai.set_responder(respond_with_meta)
    with open(config, "a") as f:
        f.write("loop:\n  eval_samples: 3\n  meta_timeout_s: 120\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", config=config, domains=["imo_proof"],
                 env=cli_env(fake_openai, PYTHONPATH=str(proofgrader_dir)))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}
    assert scripted and nodes["1"]["patch"]["dropped_why"] == {"proofgrader": "outside the evolvable paths"}
    assert "proofgrader" not in (run_dir / "nodes" / "1" / "patch.diff").read_text()
    assert nodes["1"]["status"] == "ok" and nodes["1"]["eval_keys"] != nodes["initial"]["eval_keys"]
    assert nodes["initial"]["scores"]["imo_proof"]["train"] == pytest.approx(13 / 21)
    assert nodes["1"]["scores"]["imo_proof"]["train"] == pytest.approx(13 / 21)
    roles = {role for (role,) in sqlite3.connect(run_dir / "ledger.sqlite").execute("SELECT role FROM calls")}
    assert roles == {"task", "grader", "meta", "preflight"}
    # The meta agent's feedback: the grader's verdict per proof, never the reference solutions.
    feedback = pd.read_csv(run_dir / "feedback" / "initial" / "imo_proof" / "predictions.csv", dtype=str,
                           keep_default_na=False)
    assert list(feedback["grade"]) == ["correct", "almost", "incorrect"]
    assert not {"Solution", "Grading guidelines", "Short Answer"} & set(feedback.columns)
    # The grader is agent code too: what it may write is under untrusted/, never under evals/.
    assert list((run_dir / "untrusted" / "initial" / "grader").glob("chat_history_*"))
    assert not list((run_dir / "evals").rglob("agent_evals"))


def test_a_run_can_start_from_the_proof_solver_baseline(tmp_path, fake_openai, proofgrader_dir, config):
    def respond_as_solver(request: dict) -> str:
        user = str(request["messages"][-1]["content"])
        if "You are a strict grader at the International" in user:
            return "<issues>none</issues>\n<verdict>pass</verdict>"
        if "Solve the olympiad problem below" in user:
            return "<proof>By induction on n.</proof>"
        return respond(request)

    fake_openai.set_responder(respond_as_solver)
    with open(config, "a") as f:
        f.write("loop:\n  eval_samples: 2\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--initial_agent", "proof_solver", "--max_generation", "0", config=config,
                 domains=["imo_proof"], env=cli_env(fake_openai, PYTHONPATH=str(proofgrader_dir)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "initial task agent proof_solver" in r.stdout
    assert f"grader   imo_proof: proofgrader.task_agent ({proofgrader_dir}" in r.stdout
    run_dir = tmp_path / "out" / "run"
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    # Two problems, each proved once and verified once (the verification passed).
    assert db.execute("SELECT COUNT(*) FROM calls WHERE role = 'task'").fetchone()[0] == 4
    evals = json.loads((run_dir / "nodes" / "initial" / "node.json").read_text())["eval_keys"]["imo_proof"]
    proofs = pd.read_csv(run_dir / "evals" / evals["train"] / "predictions.csv")
    assert list(proofs["prediction"]) == ["By induction on n."] * 2


def test_an_initial_agent_that_cannot_do_the_domain_is_refused(tmp_path, fake_openai):
    r = run_cli("run_optimization", "--domain", "imo_proof", "--initial_agent", "proofautograder", "--output_dir",
                str(tmp_path / "out"), "--task_model", "openai/fake", "--meta_model", "openai/fake",
                env=cli_env(fake_openai))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: initial agent proofautograder does not do imo_proof (it does imo_grading, imo_proof_grading)"]
    assert not (tmp_path / "out").exists()


def test_one_run_optimizes_grading_and_proofs_together(tmp_path, fake_openai, proofgrader_dir, config):
    from support.scripted_loop import IMPROVE, responder

    grading = responder({1: [IMPROVE]}, [])

    def respond_both(request: dict) -> str:
        user = str(request["messages"][-1]["content"])
        opening = " ".join(str(m["content"]) for m in request["messages"][:2])
        if GRADER_PROMPT in user or ("/workspace" not in opening and "## Student's answer" not in user):
            return respond(request)  # the proofgrader, or the task agent writing a proof
        return grading(request)  # the meta agent's script, or the task agent grading

    fake_openai.set_responder(respond_both)
    with open(config, "a") as f:
        f.write("loop:\n  eval_samples: 3\n  meta_timeout_s: 120\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--parent_selection", "best", config=config,
                 domains=["imo_grading", "imo_proof"], env=cli_env(fake_openai, PYTHONPATH=str(proofgrader_dir)))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}
    for node in nodes.values():
        assert node["full_eval"] == {"imo_grading": True, "imo_proof": True}
        assert node["scores"]["imo_proof"]["train"] == pytest.approx(13 / 21)
    assert nodes["1"]["scores"]["imo_grading"]["val"] == 1.0 > nodes["initial"]["scores"]["imo_grading"]["val"]
    assert "best node 1" in r.stdout
    assert {p.name for p in (run_dir / "feedback" / "1").iterdir()} == {"imo_grading", "imo_proof", "patch.diff",
                                                                         "metadata.json"}
    about = json.loads((run_dir / "feedback" / "1" / "metadata.json").read_text())
    assert about["parent"] == "initial" and set(about["train"]) == {"imo_grading", "imo_proof"}
    assert about["train"]["imo_grading"] == {"score": 1.0, "rows": 3}  # train scores only, no val
    assert set(about) == {"node", "parent", "generation", "status", "full_eval", "meta_failed", "train"}
