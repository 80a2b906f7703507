"""The plan as a new user reads it (optimizer/plan.py, issue 37): a count in the singular when it is one, and with
--dry_run the models `auto` resolves to, as the run's own plan names them."""

import os
from types import SimpleNamespace

import pytest

from services.config import Config
from support.cli import run_cli


def env_without_keys() -> dict:
    return {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE"))} | {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


@pytest.mark.e2e
def test_the_dry_run_names_the_models_auto_resolves_to_and_counts_one_generation_in_the_singular(tmp_path):
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--preset",
                "quick", "--max_generation", "1", "--dry_run", env=env_without_keys())
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert "models   task local/smollm2-135m, meta local/smollm2-135m" in lines
    assert any(line.startswith("         chosen because no provider key is set") for line in lines)
    assert "loop     1 generation, parent selection score_child_prop" in lines
    assert any(line.startswith("time     ~") and "the local model reading 130" in line for line in lines)
    assert lines[-1] == "dry run: nothing started" and not (tmp_path / "out").exists()

    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--task_model",
                "openai/o4-mini", "--meta_model", "openai/o4-mini", "--max_generation", "2", "--dry_run",
                env=env_without_keys() | {"OPENAI_API_KEY": "sk-not-used"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "models   task openai/o4-mini, meta openai/o4-mini" in r.stdout
    assert "loop     2 generations, parent selection score_child_prop" in r.stdout


def test_the_loop_line_counts_generations_and_shows_a_time_limit(tmp_path):
    from domains.registry import get_domain
    from optimizer.plan import plan_lines

    config = Config()
    config.models.task = config.models.meta = "openai/x"
    for generations, limit, expected in ((1, None, "loop     1 generation, parent selection score_child_prop"),
                                         (0, None, "loop     0 generations, parent selection score_child_prop"),
                                         (3, 90.0, "loop     3 generations, parent selection score_child_prop, "
                                                   "time limit 90 min from this command's start")):
        config.loop.max_generation, config.loop.max_minutes = generations, limit
        lines = plan_lines(tmp_path, [get_domain("imo_grading")], config, "bwrap", False)
        assert expected in lines


def test_the_plan_says_how_a_domain_races_and_why_a_domain_scored_by_a_model_does_not(tmp_path):
    from domains.registry import get_domain
    from optimizer.evaluation import split_rows
    from optimizer.plan import plan_lines
    from optimizer.racing import Racer

    config = Config()
    config.models.task = config.models.meta = config.models.grader = "openai/x"
    grading, proof = get_domain("imo_grading"), get_domain("imo_proof")
    lines = plan_lines(tmp_path, [grading], config, "bwrap", False)
    assert any(line.strip().startswith("racing: val in chunks of 10 rows") for line in lines), lines
    # imo_proof is scored by the grader package: every look would grade all its proofs again.
    for domains in ([proof], [grading, proof]):
        lines = plan_lines(tmp_path, domains, config, "bwrap", False)
        off = [line.strip() for line in lines if "racing" in line]
        assert off and all(line.startswith("racing off: scoring imo_proof calls a model") for line in off), off
    racer = Racer(SimpleNamespace(config=config), split_rows)  # the evaluator's own asks only its config
    assert racer.races(grading) and not racer.races(proof)
    config.loop.racing = False
    assert not racer.races(grading)
    assert not any("racing" in line for line in plan_lines(tmp_path, [grading], config, "bwrap", False))
