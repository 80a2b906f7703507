"""Bad configuration, bad flags and folders that are not runs: one line, exit code 2, nothing created.

Each case runs the real CLI, so what is checked is what a user sees: stderr, the exit code,
and that no run folder was left behind.
"""

import dataclasses
import json
import os
import typing

import pytest

from services.config import Config, _rules, apply_mapping, load_config, validate
from services.errors import UserError
from support.cli import FAST_CONFIG, cli_env, run_cli, run_loop

BAD_CONFIGS = {
    "sandbox:\n  memory_mb: lots\n": "sandbox.memory_mb",
    "gateway:\n  budget_usd: ten\n": "gateway.budget_usd",
    "loop:\n  max_generation: x\n": "loop.max_generation",
    "sandbox:\n  pids: -1\n": "sandbox.pids",
    "harness:\n  num_workers: true\n": "harness.num_workers",  # a bool for an int
    "gateway:\n  request_timeout_s: slow\n": "gateway.request_timeout_s",  # a str for a float
    "sandbox:\n  cpus: .inf\n": "sandbox.cpus",
    "loop:\n  eval_samples: 0\n": "loop.eval_samples",
    "loop:\n  parent_selection: bestest\n": "loop.parent_selection",
    "loop:\n  max_generations: 3\n": "loop.max_generations",  # unknown key
    "harness:\n  data_files: [a.jsonl]\n": "harness.data_files",  # a list where a mapping is expected
    "sandbox: [bwrap]\n": "sandbox",
    "gateway:\n  prices: {openai/x: [1]}\n": "gateway.prices",
    "loop:\n  stages: [[10, 0], [5, 0]]\n": "loop.stages",  # rows must grow
    "loop:\n  stages: {imo_grading: [[0, 0]]}\n": "loop.stages",  # by domain, each list checked
    "loop:\n  best_choice: luckiest\n": "loop.best_choice",
}


def assert_one_line_error(r, *names: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    for name in names:
        assert name in lines[0], lines[0]


@pytest.mark.e2e
@pytest.mark.parametrize("yaml_text,key", BAD_CONFIGS.items(), ids=BAD_CONFIGS.values())
def test_a_bad_config_value_is_one_line_naming_its_key(tmp_path, fake_openai, yaml_text, key):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    out = tmp_path / "out"
    r = run_cli("run_optimization", "--config", str(config), "--domain", "imo_grading", "--output_dir", str(out),
                env=cli_env(fake_openai))
    assert_one_line_error(r, key, str(config))
    assert not out.exists()


def test_ints_for_floats_and_yaml_defaults_pass_and_saved_configs_round_trip(tmp_path):
    config = tmp_path / "ints.yaml"
    config.write_text("sandbox:\n  cpus: 1\ngateway:\n  budget_usd: 0\n  prices: {openai/x: [1, 2.5]}\n")
    loaded = load_config(config)
    assert loaded.sandbox.cpus == 1 and loaded.gateway.budget_usd == 0
    saved = json.loads(json.dumps(loaded.to_dict()))  # as run.json keeps it
    assert Config.from_dict(saved) == loaded
    # A rule for a field that no longer exists would never run: every rule names a real field.
    fields = {f"{s.name}.{f.name}" for s in sections() for f in dataclasses.fields(getattr(Config(), s.name))}
    assert set(_rules()) <= fields


def test_every_field_but_a_bool_has_a_range_or_a_shape():
    hints = {f"{s.name}.{f.name}": typing.get_type_hints(type(getattr(Config(), s.name)))[f.name]
             for s in sections() for f in dataclasses.fields(getattr(Config(), s.name))}
    assert sorted(key for key, hint in hints.items() if hint is not bool and key not in _rules()) == []
    # The one section of no fixed keys, `search`, has its shape checked as a whole (services.config
    # settings_sections), each strategy's settings by the strategy (tests/test_strategy_settings.py).
    assert [s.name for s in dataclasses.fields(Config) if s not in sections()] == ["search"]


def sections() -> list:
    """The config's sections of fixed keys (dataclasses)."""
    return [s for s in dataclasses.fields(Config) if dataclasses.is_dataclass(getattr(Config(), s.name))]


@pytest.mark.parametrize("key, value", [
    ("loop.seed", 10**5000), ("loop.seed", -1), ("gateway.budget_usd", 10**400), ("sandbox.cpus", 10**400),
    ("loop.stages", [[10, 10**400]]), ("gateway.prices", {"openai/x": [1, 10**400]}),
    ("sandbox.docker_image", "a b"), ("sandbox.docker_image", "a\nb"), ("sandbox.docker_image", "Ubuntu:22.04"),
    ("sandbox.docker_image", "x" * 300), ("sandbox.docker_host", "ftp://engine"), ("sandbox.ray_address", "a b:1"),
    ("tracking.mlflow_uri", "javascript:alert(1)"), ("tracking.mlflow_uri", "/no/scheme"),
    ("models.task", "a b"), ("models.grader", "openai/x\x1b]0;t\x07"), ("loop.initial_agent", "dir\u202e"),
    ("harness.data_files", {"amo_bench": "a\x00b"}), ("gateway.host", "127.0.0.1; rm"),
    ("tracking.experiment", "x" * 300), ("loop.pictures_every_s", 10**9),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else type(v).__name__)
def test_out_of_range_and_misshapen_values_are_one_line(key, value):
    section, name = key.split(".")
    with pytest.raises(UserError) as e:
        apply_mapping(Config(), {section: {name: value}}, "test")
    text = str(e.value)
    assert text.startswith(f"test: {key} must be") and "\n" not in text and len(text) < 400 and text.isprintable()


@pytest.mark.parametrize("key, value", [
    ("sandbox.docker_image", "hyperagents-sandbox:latest"), ("sandbox.docker_image", "localhost:5000/a/b_c:v1.2"),
    ("sandbox.docker_image", "ghcr.io/org/img@sha256:" + "ab" * 32), ("sandbox.docker_image", "[::1]:5000/img"),
    ("sandbox.docker_host", "unix:///var/run/docker.sock"), ("sandbox.docker_host", "tcp://10.0.0.2:2376"),
    ("sandbox.ray_address", "auto"), ("sandbox.ray_address", "ray://127.0.0.1:10001"),
    ("sandbox.ray_address", "10.0.0.1:6379"), ("tracking.mlflow_uri", "http://127.0.0.1:5000"),
    ("tracking.mlflow_uri", "sqlite:///tmp/mlflow.db"), ("tracking.mlflow_uri", "file:///tmp/mlruns"),
    ("loop.seed", 2**63 - 1), ("gateway.host", "::1"), ("models.task", "bedrock/arn:aws:x/y"),
])
def test_values_of_the_right_shape_pass(key, value):
    section, name = key.split(".")
    assert getattr(getattr(apply_mapping(Config(), {section: {name: value}}, "test"), section), name) == value


def test_role_aliases_resolve_through_each_other_and_a_circle_is_one_line():
    config = apply_mapping(Config(), {"models": {"task": "openai/t", "grader": "task", "heldout_grader": "grader"}},
                           "test")
    assert config.resolve_model("heldout_grader") == "openai/t" and config.resolve_model("openai/x") == "openai/x"
    config = apply_mapping(Config(), {"models": {"task": "judge", "judge": "task"}}, "test")
    with pytest.raises(UserError, match="models.task names roles in a circle: task -> judge -> task"):
        config.resolve_model("task")


@pytest.mark.e2e
@pytest.mark.parametrize("module,flags,name", [
    ("run_optimization", ["--max_generation", "-1"], "--max_generation"),
    ("run_optimization", ["--eval_samples", "-5"], "--eval_samples"),
    ("run_optimization", ["--eval_samples", "0"], "--eval_samples"),
    ("run_optimization", ["--eval_workers", "0"], "--eval_workers"),
    ("run_optimization", ["--budget_usd", "-1"], "--budget_usd"),
    ("domains.harness", ["--num_samples", "-3"], "--num_samples"),
    ("domains.harness", ["--num_workers", "0"], "--num_workers"),
    ("domains.harness", ["--save_interval", "0"], "--save_interval"),
])
def test_a_negative_flag_exits_2_in_one_line(tmp_path, fake_openai, module, flags, name):
    out = tmp_path / "out"
    r = run_cli(module, "--domain", "imo_grading", "--output_dir", str(out), *flags, env=cli_env(fake_openai))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: argument {name}: must be"), r.stderr
    assert r.stderr.rstrip().endswith(f"(python -m {module} --help lists every flag)")
    assert not out.exists()


def test_eval_samples_minus_one_means_all_and_stays_allowed():
    from run_optimization import apply_flags, build_parser

    args = build_parser().parse_args(["--domain", "imo_grading", "--eval_samples", "-1", "--max_generation", "0"])
    config = apply_flags(load_config(), args)
    assert config.loop.eval_samples == -1 and config.loop.max_generation == 0


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["parent_is_a_file", "is_a_file", "read_only"])
def test_an_output_dir_that_cannot_be_written_is_refused_before_anything_is_made(tmp_path, fake_openai, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    output_dir = {"parent_is_a_file": blocker / "outputs", "is_a_file": blocker, "read_only": tmp_path / "ro"}[where]
    if where == "read_only":
        # Root writes through mode 0o555 (and mounting a read-only file system needs more than a test
        # should do), so this case runs only as another user; the two cases above run as root too.
        if os.geteuid() == 0:
            pytest.skip("root can write to a read-only mode folder")
        output_dir.mkdir(mode=0o555)
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(output_dir), "--run_id", "run",
                env=cli_env(fake_openai))
    assert_one_line_error(r, "--output_dir")
    assert blocker.read_text() == "a file, not a folder"
    assert not (tmp_path / "ro" / "run").exists()


@pytest.mark.e2e
def test_resume_from_a_harness_folder_names_it_as_such(tmp_path, fake_openai):
    config = tmp_path / "fast.yaml"
    config.write_text(FAST_CONFIG)
    fake_openai.set_replies(['<json>{"response": "partial"}</json>'])
    r = run_cli("domains.harness", "--domain", "imo_grading", "--subset", "train", "--num_samples", "2",
                "--output_dir", str(tmp_path / "out"), "--run_id", "h", "--model", "openai/fake",
                "--sandbox", "bwrap", "--config", str(config), env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "out" / "h"
    before = sorted(p.name for p in folder.iterdir())
    r = run_cli("run_optimization", "--resume_from", str(folder), env=cli_env(fake_openai))
    assert_one_line_error(r, "is an evaluation folder of domains.harness, not a run of run_optimization")
    assert sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.e2e
def test_resume_from_no_folder_or_a_folder_without_a_run(tmp_path, fake_openai):
    r = run_cli("run_optimization", "--resume_from", str(tmp_path / "nothing"), env=cli_env(fake_openai))
    assert_one_line_error(r, "no such folder")
    r = run_cli("run_optimization", "--resume_from", str(tmp_path), env=cli_env(fake_openai))
    assert_one_line_error(r, "not a run folder (no run.json)")


@pytest.mark.e2e
def test_resume_refuses_a_garbled_run_json_or_node_record_naming_the_file(tmp_path, fake_openai):
    config = tmp_path / "fast.yaml"
    config.write_text(FAST_CONFIG)
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", "--eval_samples", "2", config=config)
    assert r.returncode == 0, r.stderr
    run_dir = tmp_path / "out" / "run"
    run_json, node_json = run_dir / "run.json", run_dir / "nodes" / "initial" / "node.json"
    good_run, good_node = run_json.read_text(), node_json.read_text()
    node = json.loads(good_node)

    def resume_fails(path, text, *names):
        path.write_text(text)
        r = run_cli("run_optimization", "--resume_from", str(run_dir), env=cli_env(fake_openai))
        assert_one_line_error(r, *names)
        assert path.read_text() == text  # refused before anything was rewritten
        path.write_text(good_run if path == run_json else good_node)

    resume_fails(run_json, good_run[: len(good_run) // 2], str(run_json), "not a run folder", "not valid JSON")
    resume_fails(run_json, json.dumps({"domains": "imo_grading", "config": {}}), "not a run folder")
    resume_fails(run_json, json.dumps([1, 2]), "not a run folder")
    saved = json.loads(good_run)
    saved["config"]["sandbox"]["memory_mb"] = "lots"
    resume_fails(run_json, json.dumps(saved), str(run_json), "sandbox.memory_mb")
    resume_fails(node_json, good_node[:-5], str(node_json))
    for bad in ({"status": "great"}, {"generation": -1}, {"node_id": "other"}, {"scores": ["imo_grading"]},
                {"scores": {"imo_grading": {"val": "high"}}}, {"parent": 3}, {"planted": True}):
        resume_fails(node_json, json.dumps({**node, **bad}), str(node_json), next(iter(bad)))


def test_screening_stages_are_the_domains_own_the_configs_or_none():
    from domains.base import Stage
    from domains.registry import get_domain

    domain, config = get_domain("imo_grading"), Config()
    assert domain.screening(config.loop) == (Stage(10, 0.0),)
    config.loop.stages = [[5, 0], [20, 0.25]]
    assert domain.screening(config.loop) == (Stage(5, 0), Stage(20, 0.25))
    config.loop.stages = {"imo_proof": [[3, 0.5]], "imo_grading": [[4, 0.1]]}  # by domain
    validate(config)
    assert domain.screening(config.loop) == (Stage(4, 0.1),)
    assert get_domain("imo_proof").screening(config.loop) == (Stage(3, 0.5),)
    assert get_domain("aime2025").screening(config.loop) == get_domain("aime2025").stages  # not named: its own
    config.loop.skip_staged_eval = True
    assert domain.screening(config.loop) == ()
