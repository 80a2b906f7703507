"""`--set SECTION.KEY=VALUE`, `--name` and `--tag`: config fields and labels from the command line.

A `--set` is read as YAML and checked as a config file's key is, after --preset and --config and
before the specific flags; a bad one is one line naming `--set KEY` and exit 2, before any folder
is made. Names and tags reach run.json, the plan and the summary.
"""

import json
import os

import pytest

from services.config import load_config
from services.errors import UserError
from services.flags import apply_settings
from support.cli import FAST_CONFIG, cli_env, run_cli, run_loop


def test_settings_are_read_as_yaml_and_applied_in_order():
    config = apply_settings(load_config(), ["loop.seed=3", "gateway.max_concurrent_calls=8", "loop.seed=4",
                                            "loop.stages=[[5, 0], [20, 0.1]]", "gateway.budget_usd=null",
                                            ("loop.promotion", "sica")])
    assert config.loop.seed == 4 and config.gateway.max_concurrent_calls == 8
    assert config.loop.stages == [[5, 0], [20, 0.1]] and config.gateway.budget_usd is None
    assert config.loop.promotion == "sica"


@pytest.mark.parametrize("item, expected", [
    ("tracking_nope.x=1", "--set tracking_nope.x: unknown config key tracking_nope"),
    ("loop.nope=1", "--set loop.nope: unknown config key loop.nope"),
    ("gateway.max_concurrent_calls=many", "--set gateway.max_concurrent_calls: gateway.max_concurrent_calls must be"),
    ("gateway.max_concurrent_calls=0", "--set gateway.max_concurrent_calls: gateway.max_concurrent_calls must be a "
                                       "positive integer, got 0"),
    ("loop.seed=" + "9" * 4000, "--set loop.seed: a number of more than 100 digits"),
    ("loop.seed=" + "9" * 90, "--set loop.seed: loop.seed must be an integer from 0 to 2**63 - 1, got <an integer"),
    ("sandbox.docker_image=a b", "--set sandbox.docker_image: sandbox.docker_image must be a Docker image reference"),
    ('sandbox.docker_image="a\\nb"', "--set sandbox.docker_image: sandbox.docker_image must be printable text"),
    ("tracking.mlflow_uri=ftp://host/x", "--set tracking.mlflow_uri: tracking.mlflow_uri must be a URI of scheme"),
    ("loop.promotion", "--set loop.promotion: expected SECTION.KEY=VALUE"),
    ("loop=3", "--set loop: expected SECTION.KEY"),
    ("loop.stages.imo_grading=[[1, 0]]", "--set loop.stages.imo_grading: expected SECTION.KEY"),
    ("loop.seed=[1,", "--set loop.seed: not a YAML value"),
    ("loop.seed=&a 1", "--set loop.seed: not a YAML value: anchors and aliases"),
    ("loop.seed=" + "1" * 20_000, "--set loop.seed: longer than 10000 characters"),
    ("search.paired.level.x=1", "--set search.paired.level.x: expected SECTION.KEY (or search.STRATEGY.SETTING)"),
    ("search..level=1", "--set search..level: expected SECTION.KEY (or search.STRATEGY.SETTING)"),
    ("search.paired.=1", "--set search.paired.: expected SECTION.KEY (or search.STRATEGY.SETTING)"),
])
def test_a_bad_setting_is_one_line_naming_it(item, expected):
    with pytest.raises(UserError) as e:
        apply_settings(load_config(), [item])
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)


def test_a_strategys_own_setting_is_set_by_its_dotted_name_or_as_a_mapping_and_merged():
    config = apply_settings(load_config(), ["search.paired={level: 0.3}", "search.paired.test=bootstrap",
                                            "search.islands.islands=2", "loop.promotion_level=0.2"])
    assert config.search == {"paired": {"level": 0.3, "test": "bootstrap"}, "islands": {"islands": 2},
                             "not_worse_than_parent": {"level": 0.2}}
    from optimizer.plan import settings_text

    assert settings_text(config.search) == ("islands: islands 2; not_worse_than_parent: level 0.2; "
                                            "paired: level 0.3, test bootstrap")


def cli_env_plain():
    """The environment without provider keys: nothing here may reach a model."""
    return {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE"))} | {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def dry_run(tmp_path, *flags):
    return run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"),
                   "--dry_run", *flags, env=cli_env_plain())


@pytest.mark.e2e
@pytest.mark.e2e
def test_the_plan_names_a_strategys_settings_and_a_refused_one_is_one_line(tmp_path):
    r = dry_run(tmp_path, "--set", "loop.best_choice=paired", "--set", "search.paired.level=0.01")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "search   paired: level 0.01" in r.stdout.splitlines()
    r = dry_run(tmp_path, "--set", "search.paired.level=2")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: search.paired: level must be a number between 0 and 1, got 2"]


def test_set_comes_after_the_config_file_and_before_the_flags(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("loop:\n  seed: 1\n  max_generation: 2\n  parent_selection: best\n")
    r = dry_run(tmp_path, "--config", str(config), "--set", "loop.seed=7", "--set", "loop.max_generation=3",
                "--max_generation", "5", "--set", "loop.promotion=not_worse_than_parent", "--name", "exp A",
                "--tag", "baseline", "--tag", "small")
    assert r.returncode == 0, r.stderr
    assert "loop     5 generations, parent selection best, seed 7" in r.stdout  # file < --set < flag
    assert "not worse than its parent at level 0.05" in r.stdout
    assert "name     exp A, tags baseline, small" in r.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("flags, line", [
    (["--set", "loop.nope=1"], "error: --set loop.nope: unknown config key loop.nope (known: "),
    (["--set", "gateway.max_concurrent_calls=eight"],
     "error: --set gateway.max_concurrent_calls: gateway.max_concurrent_calls must be an integer or null, got 'eight'"),
    (["--name", "a\x1b[2Jb"], "error: --name 'a\\x1b[2Jb': holds a control or bidi character"),
    (["--name", "x" * 121], "error: --name 'xxxxx"),
    (["--tag", "ok", "--tag", ""], "error: --tag '': empty"),
])
def test_bad_settings_and_labels_stop_the_command_in_one_line(tmp_path, flags, line):
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), *flags,
                env=cli_env_plain())
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(line) and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_settings_names_and_tags_are_kept_in_run_json_and_shown(tmp_path, fake_openai):
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 4\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", "--set", "gateway.max_concurrent_calls=3",
                 "--set", "loop.promotion=sica", "--name", "first try", "--tag", "demo", config=config)
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "out" / "run" / "run.json").read_text())
    assert record["schema_version"] == 3 and record["name"] == "first try" and record["tags"] == ["demo"]
    assert record["config"]["gateway"]["max_concurrent_calls"] == 3 and record["config"]["loop"]["promotion"] == "sica"
    assert "name     first try, tags demo" in r.stdout
    assert "run finished (first try, tags demo)" in r.stdout

    # a resume keeps the run's own name and config unless told otherwise; --set applies over the saved config
    r = run_loop(tmp_path, fake_openai, "--resume_from", str(tmp_path / "out" / "run"), "--set",
                 "loop.promotion=score_above", "--tag", "resumed", config=config)
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "out" / "run" / "run.json").read_text())
    assert record["name"] == "first try" and record["tags"] == ["resumed"]
    assert record["config"]["loop"]["promotion"] == "score_above"
    assert record["config"]["gateway"]["max_concurrent_calls"] == 3


@pytest.mark.e2e
def test_the_harness_takes_set_too(tmp_path, fake_openai):
    out = tmp_path / "out"
    r = run_cli("domains.harness", "--domain", "imo_grading", "--subset", "_filtered_100_val", "--num_samples", "2",
                "--output_dir", str(out), "--model", "openai/fake", "--set", "harness.num_workers=nope",
                env=cli_env(fake_openai))
    assert r.returncode == 2 and r.stderr == ("error: --set harness.num_workers: harness.num_workers must be an "
                                              "integer, got 'nope'\n")
    assert not out.exists()
    r = run_cli("domains.harness", "--domain", "imo_grading", "--subset", "_filtered_100_val", "--num_samples", "2",
                "--output_dir", str(out), "--run_id", "h", "--model", "openai/fake", "--set", "sandbox.backend=bwrap",
                "--set", "gateway.budget_usd=0", env=cli_env(fake_openai))
    assert r.returncode == 2 and "budget" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert json.loads((out / "h" / "run.json").read_text())["llm_calls"] == 0
