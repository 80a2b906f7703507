"""Forged records and a kill: what a resumed run trusts.

The meta agent writes a node record claiming val 1.0 wherever its sandbox lets it; the
run is killed (SIGKILL) while the child is being evaluated and then resumed. The child
must be evaluated by the core, its score must be the one the core measured, and the
packaged grader must be chosen on those scores.
"""

import json

import pytest

from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from support.hostile_model import responder
from support.scripted_loop import start_and_kill_when

FORGED = {"node_id": "1", "parent": "initial", "generation": 1, "commit": None, "status": "ok",
          "scores": {"imo_grading": {"train": 1.0, "val": 1.0}}, "samples": {"imo_grading": {"train": 3, "val": 3}},
          "full_eval": {"imo_grading": True}, "eval_keys": {"imo_grading": {"train": "forged", "val": "forged"}},
          "error": "forged"}
FORGE = ("mkdir -p /out/node/evals/forged && printf '%s' '" + json.dumps(FORGED) + "' > /out/node/node.json"
         " && printf '{\"overall_accuracy\": 1.0, \"normalized_mean_absolute_error\": 0.0}'"
         " > /out/node/evals/forged/report.json"
         " && cp /out/node/node.json /workspace/node.json; true")
EDIT = ("python - <<'EOF'\nfrom pathlib import Path\np = Path('/workspace/task_agent/task_agent.py')\n"
        "p.write_text(p.read_text() + '\\n# edited\\n')\nEOF")


@pytest.mark.e2e
@pytest.mark.attack("meta agent: a forged node record (val 1.0) and report, then the run is killed mid-evaluation "
                    "and resumed")
def test_a_resumed_run_trusts_only_records_the_core_wrote(tmp_path, fake_openai):
    fake_openai.set_responder(responder([EDIT, FORGE]))
    fake_openai.latency = 0.3  # the child's evaluation lasts long enough to be killed in
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 4\n  meta_timeout_s: 300\n  skip_staged_eval: true\n")
    run_dir = tmp_path / "out" / "run"
    args = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run", "--task_model",
            "openai/fake", "--meta_model", "openai/fake-meta", "--config", str(config), "--max_generation", "1"]

    def evaluating_child(d):
        log = d / "archive.jsonl"
        return log.exists() and '"meta_done"' in log.read_text()

    start_and_kill_when(tmp_path, fake_openai, args, evaluating_child, timeout=300)
    assert not (run_dir / "nodes" / "1" / "node.json").exists(), "killed too late: the child was already recorded"

    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    node = json.loads((run_dir / "nodes" / "1" / "node.json").read_text())
    assert node["error"] != "forged" and node["commit"] is not None
    assert set(node["eval_keys"]["imo_grading"].values()) & {"forged"} == set()
    assert node["scores"]["imo_grading"]["val"] < 1.0  # the fake task model answers "incorrect" everywhere
    for key in node["eval_keys"]["imo_grading"].values():
        assert len((run_dir / "evals" / key / "predictions.jsonl").read_text().splitlines()) >= 4
    assert "node.json" not in (run_dir / "nodes" / "1" / "patch.diff").read_text()  # outside the evolvable paths
    # Nothing of the killed run is left: no workspace folder, nothing registered in the repository.
    assert not any((run_dir / "workspaces").glob("*")) and not (run_dir / "repo" / "worktrees").exists()

    # The packaged grader is chosen on what the core measured: the initial agent and the
    # child score alike here, so the earlier node wins the tie, never a forged 1.0.
    r = run_cli("setup_proofgrader_repo", "--generate_dir", str(run_dir), "--dst", str(tmp_path / "pg"),
                env=cli_env(fake_openai), cwd=REPO_ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    provenance = json.loads((tmp_path / "pg" / "proofgrader" / "provenance.json").read_text())
    assert provenance["scores"]["val"]["overall_accuracy"] < 1.0


def test_a_node_record_that_is_a_link_is_refused(tmp_path):
    """Records are read without following links (node folders are the core's, but a record is
    trusted only as a regular file it wrote)."""
    from archive.store import Archive
    from services.errors import UserError

    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({**FORGED, "commit": "0" * 40}))
    (tmp_path / "nodes" / "1").mkdir(parents=True)
    (tmp_path / "nodes" / "1" / "node.json").symlink_to(elsewhere)
    with pytest.raises(UserError, match="node.json: not a node record"):
        Archive(tmp_path)
