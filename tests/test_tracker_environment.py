"""Trackers honour their libraries' own environment variables (issue 37): MLFLOW_TRACKING_URI and
MLFLOW_EXPERIMENT_NAME, WANDB_MODE, WANDB_PROJECT, WANDB_ENTITY and WANDB_DIR, as their users expect. The
command's settings (a config, --set) come first, the environment next, the defaults last; a handed run
folder's tracker settings are never taken on their own (archive/run_folder.py GUARDED)."""

import json
import time

import pytest

from archive.records import RunRecord
from archive.run_folder import resumed_config, saved_config
from optimizer.events import RunEnded, RunStarted, Warned
from optimizer.trackers.environment import Chosen, chosen
from services.config import Config, TrackingConfig, load_config
from services.errors import UserError
from services.flags import apply_settings
from support.cli import cli_env, run_loop
from support.scripted_loop import IMPROVE, loop_config, responder
from support.synthetic_run import make_run
from test_trackers import PRICES, _trackers, wandb_records

ENVIRONMENT = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY",
               "WANDB_DIR")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def test_the_command_then_the_environment_then_the_default(monkeypatch):
    config = TrackingConfig()
    assert chosen("mlflow", config, "mlflow_uri") == Chosen(None, "default")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "exp")
    assert (chosen("mlflow", config, "mlflow_uri").value, chosen("mlflow", config, "mlflow_uri").source) == \
        ("http://tracking.example:5000", "MLFLOW_TRACKING_URI")
    assert chosen("wandb", config, "wandb_mode").value == "online"
    assert chosen("wandb", config, "experiment").value == "theirs"
    assert chosen("mlflow", config, "experiment").value == "exp"
    assert chosen("wandb", config, "wandb_entity").value is None  # WANDB_ENTITY unset: the account's default
    given = TrackingConfig(mlflow_uri="http://mine:5000", experiment="mine", wandb_mode="online")
    assert chosen("mlflow", given, "mlflow_uri").value == "http://mine:5000"
    assert chosen("mlflow", given, "mlflow_uri").source == "tracking.mlflow_uri"
    assert chosen("wandb", given, "experiment").value == chosen("mlflow", given, "experiment").value == "mine"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # set but empty: as unset
    assert chosen("mlflow", config, "mlflow_uri").source == "default"


def test_mlflow_logs_where_its_environment_says(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    made = make_run(run_dir, nodes=4, seed=3)
    store = (tmp_path / "users-store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    trackers, told, _ = _trackers(run_dir, ["mlflow"])
    trackers.events.emit(RunStarted(str(run_dir)))
    trackers.events.emit(RunEnded("finished"))
    assert not [e for e in told if isinstance(e, Warned)]
    assert not (run_dir / "tracking" / "mlruns").exists()
    kept = json.loads((run_dir / "tracking" / "mlflow.json").read_text())["kept"]
    assert kept["uri"] == store
    client = MlflowClient(tracking_uri=store)
    run = client.get_run(kept["run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "from-env"
    assert len(client.get_metric_history(run.info.run_id, "generation")) == len(made["nodes"])
    # The command's setting comes before the environment.
    other = tmp_path / "run2"
    make_run(other, nodes=2, seed=1)
    trackers, told, _ = _trackers(other, ["mlflow"], mlflow_uri=(tmp_path / "commands-store").as_uri())
    trackers.events.emit(RunStarted(str(other)))
    trackers.events.emit(RunEnded("finished"))
    assert not [e for e in told if isinstance(e, Warned)]
    assert json.loads((other / "tracking" / "mlflow.json").read_text())["kept"]["uri"] == \
        (tmp_path / "commands-store").as_uri()
    assert (tmp_path / "commands-store").is_dir() and not (other / "tracking" / "mlruns").exists()


def test_wandb_takes_its_project_team_and_folder_from_its_environment(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    make_run(run_dir, nodes=3, seed=2)
    monkeypatch.setenv("WANDB_PROJECT", "env-project")
    monkeypatch.setenv("WANDB_ENTITY", "env-team")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    trackers, told, _ = _trackers(run_dir, ["wandb"])
    trackers.events.emit(RunStarted(str(run_dir)))
    trackers.events.emit(RunEnded("finished"))
    assert not [e for e in told if isinstance(e, Warned)]
    assert not (run_dir / "tracking" / "wandb").exists()
    (path,) = (tmp_path / "wandb-home").glob("wandb/offline-run-*/run-*.wandb")
    runs: list = []
    deadline = time.monotonic() + 60
    while not runs and time.monotonic() < deadline:  # W&B's service writes the file after finish() returns
        try:
            runs = [r.run for r in wandb_records(path) if r.WhichOneof("record_type") == "run"]
        except AssertionError:  # a record half written yet
            pass
        time.sleep(0.2)
    assert runs
    assert (runs[0].project, runs[0].entity) == ("env-project", "env-team")


def test_wandb_mode_disabled_in_the_environment_writes_nothing(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    make_run(run_dir, nodes=2, seed=2)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    trackers, told, _ = _trackers(run_dir, ["wandb"])
    trackers.events.emit(RunStarted(str(run_dir)))
    trackers.events.emit(RunEnded("finished"))
    assert not [e for e in told if isinstance(e, Warned)]
    assert not list((run_dir / "tracking").glob("wandb/offline-run-*"))


def test_a_handed_folders_tracker_uri_is_not_taken_though_the_environment_is(tmp_path, monkeypatch):
    """A run.json naming an MLflow server: a resume's config takes the command's (archive/run_folder.py; here
    without refusing, as readers do), so the tracker logs where the user's own environment says."""
    run_dir = tmp_path / "handed"
    make_run(run_dir, nodes=2, seed=4)
    record = RunRecord.read(run_dir)
    theirs = Config.from_dict(record.config)
    theirs.tracking.mlflow_uri, theirs.tracking.wandb_mode = "http://attacker.example:5000", "online"
    config = resumed_config(saved_config(RunRecord(record.domains, theirs.to_dict()), run_dir), load_config(),
                            run_dir / "run.json", refuse=False)
    assert config.tracking.mlflow_uri is None and config.tracking.wandb_mode is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "users-store").as_uri())
    assert chosen("mlflow", config.tracking, "mlflow_uri").value == (tmp_path / "users-store").as_uri()
    assert chosen("wandb", config.tracking, "wandb_mode").value == "offline"


def test_a_setting_given_at_the_old_default_still_beats_the_environment(tmp_path, monkeypatch):
    """`--set tracking.wandb_mode=offline` (or experiment hyperagents) is the user's choice: it used to read as
    the default, so WANDB_MODE=online in the environment sent the run to W&B all the same."""
    from optimizer.trackers.wandb_tracker import WandbTracker

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "exp")
    given = apply_settings(load_config(), ["tracking.wandb_mode=offline", "tracking.experiment=hyperagents"])
    assert chosen("wandb", given.tracking, "wandb_mode") == Chosen("offline", "tracking.wandb_mode")
    assert chosen("wandb", given.tracking, "experiment") == Chosen("hyperagents", "tracking.experiment")
    assert chosen("mlflow", given.tracking, "experiment") == Chosen("hyperagents", "tracking.experiment")
    assert (WandbTracker(tmp_path, given.tracking).mode, WandbTracker(tmp_path, given.tracking).project) == \
        ("offline", "hyperagents")
    unset = load_config()
    assert (unset.tracking.wandb_mode, unset.tracking.experiment) == (None, None)
    assert chosen("wandb", unset.tracking, "wandb_mode") == Chosen("online", "WANDB_MODE")
    assert chosen("mlflow", unset.tracking, "experiment") == Chosen("exp", "MLFLOW_EXPERIMENT_NAME")
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    assert chosen("wandb", unset.tracking, "wandb_mode") == Chosen("offline", "default")
    assert chosen("wandb", unset.tracking, "experiment") == Chosen("hyperagents", "default")
    assert chosen("mlflow", unset.tracking, "experiment") == Chosen("hyperagents", "default")


def test_null_settings_are_valid_and_the_rules_still_hold(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("tracking:\n  wandb_mode: null\n  experiment: null\n")
    assert (load_config(config).tracking.wandb_mode, load_config(config).tracking.experiment) == (None, None)
    assert apply_settings(load_config(), ["tracking.wandb_mode=online"]).tracking.wandb_mode == "online"
    for setting, expected in (("tracking.wandb_mode=sometimes", "one of offline, online"),
                              ("tracking.experiment=' '", "a name of at most 256 characters")):
        with pytest.raises(UserError, match=expected):
            apply_settings(load_config(), [setting])


def test_a_resume_that_says_offline_is_not_asked_to_accept_a_folders_online(tmp_path):
    run_dir = tmp_path / "handed"
    make_run(run_dir, nodes=2, seed=4)
    record = RunRecord.read(run_dir)
    theirs = Config.from_dict(record.config)
    theirs.tracking.wandb_mode = "online"
    saved = saved_config(RunRecord(record.domains, theirs.to_dict()), run_dir)
    with pytest.raises(UserError, match="pass --set tracking.wandb_mode=online to accept it"):
        resumed_config(saved, load_config(), run_dir / "run.json")
    offline = apply_settings(load_config(), ["tracking.wandb_mode=offline"])
    assert resumed_config(saved, offline, run_dir / "run.json").tracking.wandb_mode == "offline"


@pytest.mark.e2e
def test_a_run_with_mlflow_tracking_uri_set_logs_there(tmp_path, fake_openai):
    """The issue's case: a run with MLFLOW_TRACKING_URI set wrote to RUN/tracking/mlruns all the same."""
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "users-store").as_uri()
    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--track", "mlflow",
                 config=loop_config(tmp_path, gateway=PRICES),
                 env=cli_env(fake_openai, MLFLOW_TRACKING_URI=store, MLFLOW_ALLOW_FILE_STORE="true"))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    assert not (run_dir / "tracking" / "mlruns").exists()
    kept = json.loads((run_dir / "tracking" / "mlflow.json").read_text())["kept"]
    assert kept["uri"] == store
    client = MlflowClient(tracking_uri=store)
    assert [m.step for m in client.get_metric_history(kept["run_id"], "generation")] == [0, 1]
