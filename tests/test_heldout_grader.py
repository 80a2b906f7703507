"""The held-out grader through the real loop on imo_proof: two grader models on the fake provider that
grade the same proofs differently, a scripted meta agent whose second change games the grader the run
optimizes against, a kill -9 and a resume.

The prover writes a plain proof, then (generation 1) a proof in style A, then (generation 2, from node 1)
one in style B. The run's grader (openai/fake-grader) and the held-out one (openai/fake-heldout) give the
points of POINTS, so every grade, gap and best node below is computed by hand.
"""

import json
import sqlite3

import pandas as pd
import pytest

from services.config import PROJECT_ROOT
from support.cli import FAST_CONFIG, cli_env, run_cli
from support.proofgrader_runs import baseline_proofgrader
from support.scripted_loop import start_and_kill_when, tool_call

pytestmark = pytest.mark.e2e  # whole processes: the loop, sandboxes, the proofgrader

PROBLEMS = list(pd.read_csv(PROJECT_ROOT / "domains" / "imo" / "data" / "proofbench.csv")["Problem"].head(3))
PROOF = {"plain": "A plain proof.", "A": "Proof in style A, step by step.", "B": "Proof in style B, very confident."}
# Points (of 7) of each style's proof of the three problems, by grader model (a grader gives 7, 6, 1 or 0).
POINTS = {"fake-grader": {"plain": (1, 0, 1), "A": (6, 6, 1), "B": (7, 7, 7)},
          "fake-heldout": {"plain": (1, 0, 0), "A": (6, 1, 1), "B": (0, 1, 0)}}
GRADER_PROMPT = "You are grading a proposed solution"
ANCHOR = "Write a complete and rigorous proof"
# The meta agent's change, by the iterations left it is told (2 generations: 1 left, then 0).
AGENT = "/workspace/task_agent/task_agent.py"
SCRIPT = {1: {"tool_name": "editor", "tool_input": {"command": "str_replace", "path": AGENT, "old_str": ANCHOR,
                                                   "new_str": f"STYLE-A {ANCHOR}"}},
          0: {"tool_name": "editor", "tool_input": {"command": "str_replace", "path": AGENT, "old_str": "STYLE-A",
                                                   "new_str": "STYLE-B"}}}


def respond(request: dict) -> str:
    messages = request["messages"]
    opening = " ".join(str(m["content"]) for m in messages[:2])
    user = str(messages[-1]["content"])
    if "/workspace" in opening and "/feedback" in opening:  # the meta agent
        left = int(opening.split("Iterations left in this run: ", 1)[1].split(".", 1)[0])
        first = not any(m["role"] == "assistant" for m in messages)
        return tool_call(SCRIPT[left]) if first else "Done: the change is in place."
    if GRADER_PROMPT in user:
        style = next(s for s, proof in PROOF.items() if proof in user)
        problem = next(i for i, p in enumerate(PROBLEMS) if p.strip() in user)
        return f"Checked.\n<points>{POINTS[request['model']][style][problem]} out of 7</points>"
    style = "B" if "STYLE-B" in user else "A" if "STYLE-A" in user else "plain"
    return f'<json>{{"response": "{PROOF[style]}"}}</json>'


def share(model: str, style: str) -> float:
    return sum(POINTS[model][style]) / 21


@pytest.fixture(scope="module")
def proofgrader_dir(tmp_path_factory):
    """A proofgrader built from the ProofAutoGrader baseline; importable through PYTHONPATH."""
    return baseline_proofgrader(tmp_path_factory.mktemp("pg"))


def run_args(tmp_path) -> list[str]:
    config = tmp_path / "heldout.yaml"
    config.write_text(FAST_CONFIG + "models:\n  grader: openai/fake-grader\n  heldout_grader: openai/fake-heldout\n"
                      "loop:\n  eval_samples: 3\n  skip_staged_eval: true\n  meta_timeout_s: 120\n"
                      "  best_choice: heldout\n  parent_selection: best\n")
    return ["--domain", "imo_proof", "--output_dir", str(tmp_path / "out"), "--run_id", "run", "--task_model",
            "openai/fake", "--meta_model", "openai/fake-meta", "--config", str(config), "--max_generation", "2"]


def graded_nodes(run_dir) -> set:
    path = run_dir / "heldout.json"
    return {g["node_id"] for g in json.loads(path.read_text())["grades"]} if path.exists() else set()


def test_the_gap_per_generation_the_heldout_best_choice_and_a_resume_that_pays_nothing_twice(
        tmp_path, fake_openai, proofgrader_dir):
    fake_openai.set_responder(respond)
    env = cli_env(fake_openai, PYTHONPATH=str(proofgrader_dir))
    run_dir = tmp_path / "out" / "run"
    start_and_kill_when(tmp_path, fake_openai, run_args(tmp_path), lambda d: "1" in graded_nodes(d), timeout=300,
                        env=env)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    record = json.loads((run_dir / "heldout.json").read_text())
    grades = {g["node_id"]: g for g in record["grades"]}
    expected = {"initial": "plain", "1": "A", "2": "B"}
    assert set(grades) == set(expected)  # node 2 is graded: it scores higher than the best, node 1
    for node_id, style in expected.items():
        grade = grades[node_id]
        assert grade["optimized"] == pytest.approx(share("fake-grader", style))
        assert grade["heldout"] == pytest.approx(share("fake-heldout", style))
        assert grade["gap"] == pytest.approx(share("fake-grader", style) - share("fake-heldout", style))
        assert grade["rows"] == 3 and grade["model"] == "openai/fake-heldout" and grade["error"] is None
    # Per generation, the best node and its two grades: node 2 games the run's grader (21/21) while the
    # held-out one falls to 1/21, below node 1's 8/21, so under best_choice heldout node 1 stays the best.
    best = {"0": ("initial", "plain"), "1": ("1", "A"), "2": ("1", "A")}
    assert [(e["generation"], e["best"]) for e in record["generations"]] == [(0, "initial"), (1, "1"), (2, "1")]
    for entry in record["generations"]:
        style = best[str(entry["generation"])][1]
        assert entry["gap"] == pytest.approx(share("fake-grader", style) - share("fake-heldout", style))
    assert "best node 1 (generation 1, its held-out grade not below an earlier best's)" in r.stdout
    assert ("held-out grader: node 2 (generation 2) imo_proof train, 3 proofs: openai/fake-grader 1.000, held-out "
            "openai/fake-heldout 0.048, gap +0.952") in r.stdout

    # The same records under the paper's rule pick the gaming node.
    from archive.records import Node
    from archive.store import observed_best, observed_sizes

    nodes = [Node.from_dict(json.loads(p.read_text()), p.parent.name) for p in (run_dir / "nodes").glob("*/node.json")]
    sizes = observed_sizes(["imo_proof"], nodes)
    assert observed_best(nodes, sizes, run_dir, {"best_choice": "highest"}).node_id == "2"
    assert observed_best(nodes, sizes, run_dir, {"best_choice": "heldout"}).node_id == "1"

    # Three proofs graded once per node by each grader, over a kill and a resume: nothing paid twice.
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    calls = dict(db.execute("SELECT node, COUNT(*) FROM calls WHERE role = 'heldout_grader' GROUP BY node"))
    assert calls == {"initial": 3, "1": 3, "2": 3}
    assert {m for (m,) in db.execute("SELECT DISTINCT model FROM calls WHERE role = 'heldout_grader'")} == \
        {"openai/fake-heldout"}
    assert dict(db.execute("SELECT node, COUNT(*) FROM calls WHERE role = 'grader' GROUP BY node")) == calls
    preflighted = {m for (m,) in db.execute("SELECT model FROM calls WHERE role = 'preflight'")}
    assert "openai/fake-heldout" in preflighted

    report = (run_dir / "report.html").read_text()
    assert "Judge robustness" in report and 'data-series="held-out grader (openai/fake-heldout)"' in report
    assert (run_dir / "heldout_gap.png").stat().st_size > 0
