"""Experiment trackers (--track): a real run logged to MLflow, W&B and TensorBoard, each read back
with that library's own reader; a resumed run continues the same tracker runs and logs each node
once; a tracker that breaks mid-run is a warning; agent text is cut before a tracker gets it; a
missing extra is one line before anything starts.

W&B 0.31 has no Python reader of its offline files (`wandb sync --dry-run` only names them), so
`wandb_records` reads the .wandb file's framing (W&B's LevelDB-style log: a 7-byte header, 32 KiB
blocks of CRC-checked records) and decodes every record with W&B's own protobuf schema, as
`wandb sync` does before it uploads."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from archive.records import Node
from archive.store import Archive
from optimizer.events import Events, NodeFinished, RunEnded, RunStarted, Warned
from optimizer.trackers import Trackers
from services.config import Config
from support.cli import REPO_ROOT, cli_env, run_cli, run_loop
from support.scripted_loop import IMPROVE, MARKER, loop_config, responder
from support.synthetic_run import make_run

PRICES = "  prices: {openai/fake: [1.0, 1.0], openai/fake-meta: [2.0, 2.0]}\n"
W_AND_B_BLOCK = 32768


def wandb_records(path: Path) -> list:
    """Every record of a W&B offline run file, each checked against its CRC and parsed with
    wandb.proto's Record."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0)
    pos, parts, found = 7, b"", []
    while len(data) - pos >= 7:
        if W_AND_B_BLOCK - pos % W_AND_B_BLOCK < 7:  # a block's tail too short for a header is padding
            pos += W_AND_B_BLOCK - pos % W_AND_B_BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            continue
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc
        parts += chunk
        if kind in (1, 4):  # a record whole, or its last piece
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            found.append(record)
            parts = b""
    return found


def history_rows(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


@pytest.mark.e2e
def test_a_run_is_logged_to_each_tracker_and_a_resume_logs_each_node_once(tmp_path, fake_openai, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as a reader of its file store sets it (docs/dashboard.md)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    config = loop_config(tmp_path, gateway=PRICES)
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--parent_selection", "best",
                 "--track", "mlflow,tensorboard", "--track", "wandb", "--name", "tracked run", "--tag", "trial",
                 config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warning" not in r.stdout, r.stdout
    run_dir = tmp_path / "out" / "run"
    first = {name: json.loads((run_dir / "tracking" / f"{name}.json").read_text()) for name in ("mlflow", "wandb")}
    # A resume takes its trackers from the command line only (archive/run_folder.py): without them it is
    # refused in one line naming the flag; with them, it continues each tracker's run.
    # (--config: the run's prices, which a folder's run.json does not decide either.)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--config", config, env=cli_env(fake_openai),
                timeout=600)
    assert r.returncode == 2 and r.stderr.strip().endswith("pass --track mlflow,tensorboard,wandb to accept it"), \
        r.stderr
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--max_generation", "2", "--config", config,
                "--track", "mlflow,tensorboard,wandb", env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warning" not in r.stdout, r.stdout
    tracking = run_dir / "tracking"

    # MLflow: one run, continued; each node's numbers once, at its generation.
    kept = json.loads((tracking / "mlflow.json").read_text())
    assert kept["kept"]["run_id"] == first["mlflow"]["kept"]["run_id"] and set(kept["logged"]) == {"initial", "1", "2"}
    client = MlflowClient(tracking_uri=(tracking / "mlruns").as_uri())
    run = client.get_run(kept["kept"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["best_node"] == "1"
    assert run.info.run_name == "tracked run" and run.data.tags["tags"] == "trial"
    assert run.data.params["loop.max_generation"] == "1" and run.data.params["domains"] == "imo_grading"
    val = client.get_metric_history(run.info.run_id, "imo_grading/val/score")
    assert sorted(m.step for m in val) == [0, 1]  # node 2 made no change: it has no score
    assert {m.step: m.value for m in val}[1] == 1.0
    assert [m.step for m in client.get_metric_history(run.info.run_id, "generation")] == [0, 1, 2]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "imo_grading/val/rows")] == [20, 20]
    assert client.get_metric_history(run.info.run_id, "cost_usd/meta")[0].value > 0
    assert {m.step for m in client.get_metric_history(run.info.run_id, "best/imo_grading/val/score")} == {0, 1}
    got = Path(client.download_artifacts(run.info.run_id, "nodes/1/patch.diff", str(tmp_path / "dl")))
    assert MARKER in got.read_text()
    record = json.loads(Path(client.download_artifacts(run.info.run_id, "nodes/2/node.json", str(tmp_path / "dl")))
                        .read_text())
    assert record["parent"] == "1" and record["generation"] == 2 and record["status"] == "no_change"
    assert json.loads(Path(client.download_artifacts(run.info.run_id, "run.json", str(tmp_path / "dl")))
                      .read_text())["domains"] == ["imo_grading"]

    # TensorBoard: one folder, an event file per process, each step once.
    events = EventAccumulator(str(tracking / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert len(list((tracking / "tensorboard").glob("events.out.tfevents.*"))) == 2
    assert [(e.step, e.value) for e in events.Scalars("imo_grading/val/score")] == [(0, 0.5), (1, 1.0)]
    assert [e.step for e in events.Scalars("generation")] == [0, 1, 2]
    patch = events.Tensors("nodes/1/patch/text_summary")
    assert len(patch) == 1 and MARKER in patch[0].tensor_proto.string_val[0].decode()
    assert [t.tensor_proto.string_val[0].decode() for t in events.Tensors("best_node/text_summary")] == ["initial", "1"]

    # W&B: one run id, an offline folder per process; each node a history row once.
    kept = json.loads((tracking / "wandb.json").read_text())
    assert kept["kept"]["run_id"] == first["wandb"]["kept"]["run_id"]
    folders = sorted((tracking / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(f.name.endswith(kept["kept"]["run_id"]) for f in folders)
    rows = [row for row in history_rows(tracking / "wandb") if "valid" in row]
    assert sorted(row["generation"] for row in rows) == [0, 1, 2]
    assert {row["generation"]: row.get("imo_grading/val/score") for row in rows} == {0: 0.5, 1: 1.0, 2: None}
    runs = [rec.run for path in sorted((tracking / "wandb").glob("offline-run-*/run-*.wandb"))
            for rec in wandb_records(path) if rec.WhichOneof("record_type") == "run"]
    assert {run.run_id for run in runs} == {kept["kept"]["run_id"]}
    assert (runs[0].display_name, list(runs[0].tags)) == ("tracked run", ["trial"])
    config = [{item.key: json.loads(item.value_json) for item in run.config.update} for run in runs]
    assert config[0]["domains"] == ["imo_grading"] and [c["loop"]["max_generation"] for c in config] == [1, 2]
    assert MARKER in (folders[0] / "files" / "nodes" / "1" / "patch.diff").read_text()
    assert json.loads((folders[1] / "files" / "nodes" / "2" / "node.json").read_text())["parent"] == "1"


def _trackers(run_dir: Path, backends: list[str], text_kb: int = 256, mlflow_uri: str | None = None
              ) -> tuple[Trackers, list, Archive]:
    config = Config()
    config.tracking.backends, config.tracking.text_kb, config.tracking.mlflow_uri = backends, text_kb, mlflow_uri
    archive = Archive(run_dir)
    told: list = []
    events = Events(told.append)

    def best():
        scored = [n for n in archive.ordered() if n.scores.get("imo_grading", {}).get("val") is not None]
        return max(scored, key=lambda n: n.scores["imo_grading"]["val"], default=None)

    trackers = Trackers(run_dir, config, archive, best, events)
    events.subscribe(trackers)
    return trackers, told, archive


@pytest.mark.e2e
def test_a_tracker_that_breaks_mid_run_is_a_warning_and_a_resume_catches_it_up(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")

    run_dir = tmp_path / "run"
    made = make_run(run_dir, nodes=4, seed=3)
    trackers, told, archive = _trackers(run_dir, ["mlflow"])
    trackers.events.emit(RunStarted(str(run_dir)))
    run_id = json.loads((run_dir / "tracking" / "mlflow.json").read_text())["kept"]["run_id"]
    client = MlflowClient(tracking_uri=(run_dir / "tracking" / "mlruns").as_uri())
    assert len(client.get_metric_history(run_id, "generation")) == len(made["nodes"])  # caught up at start
    # The store breaks (as a full disk would): its run's metrics folder becomes a file.
    metrics = next((run_dir / "tracking" / "mlruns").glob(f"*/{run_id}/metrics"))
    shutil.rmtree(metrics)
    metrics.write_text("")
    late = Node("late", made["nodes"][-1], 9, scores={"imo_grading": {"val": 0.9}}, samples={"imo_grading": {"val": 5}})
    archive.record(late)
    trackers.events.emit(NodeFinished(late))
    trackers.events.emit(NodeFinished(late))
    trackers.events.emit(RunEnded("finished"))
    warned = [e.message for e in told if isinstance(e, Warned)]
    assert len(warned) == 1 and warned[0].startswith("tracker mlflow: logging node late failed")
    # Repaired, the next process catches the node up, in the same MLflow run, and logs the others no more.
    metrics.unlink()
    metrics.mkdir()
    trackers, told, _ = _trackers(run_dir, ["mlflow"])
    trackers.events.emit(RunStarted(str(run_dir)))
    trackers.events.emit(RunEnded("finished"))
    assert not [e for e in told if isinstance(e, Warned)]
    assert [m.step for m in client.get_metric_history(run_id, "generation")] == [9]
    assert client.get_run(run_id).data.tags["best_node"] == "late"


def test_runs_given_one_mlflow_store_are_runs_of_one_experiment(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "shared" / "mlruns").as_uri()
    for name, nodes in (("first", 3), ("second", 5)):
        make_run(tmp_path / name, nodes=nodes, seed=nodes)
        trackers, told, _ = _trackers(tmp_path / name, ["mlflow"], mlflow_uri=store)
        trackers.events.emit(RunStarted(str(tmp_path / name)))
        trackers.events.emit(RunEnded("stopped"))
        assert not [e for e in told if isinstance(e, Warned)]
        assert not (tmp_path / name / "tracking" / "mlruns").exists()
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("hyperagents").experiment_id])
    assert sorted((r.info.run_name, r.info.status, len(client.get_metric_history(r.info.run_id, "generation")))
                  for r in runs) == [("first", "KILLED", 3), ("second", "KILLED", 5)]


def test_agent_text_is_cut_before_a_tracker_gets_it(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    made = make_run(run_dir, nodes=12, seed=5, hostile=True)
    node_id = made["hostile"]["patch"]
    (run_dir / "nodes" / node_id / "patch.diff").write_text("+ x = 1\n" * 100_000)  # 800 KB
    (run_dir / "tracking").mkdir()
    trackers, told, _ = _trackers(run_dir, ["tensorboard"], text_kb=2)
    trackers.events.emit(RunStarted(str(run_dir)))
    trackers.events.emit(RunEnded("finished"))
    assert not [e for e in told if isinstance(e, Warned)]
    events = EventAccumulator(str(run_dir / "tracking" / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    shown = events.Tensors(f"nodes/{node_id}/patch/text_summary")[0].tensor_proto.string_val[0].decode()
    assert 2048 < len(shown) < 2048 * 1.5 + 300 and "cut at 2048 bytes for the tracker" in shown
    error_node = made["hostile"]["error"]
    record = events.Tensors(f"nodes/{error_node}/text_summary")[0].tensor_proto.string_val[0].decode()
    assert len(record) < 20_000


def test_a_missing_or_unknown_tracker_is_one_line_before_anything_starts(tmp_path):
    out = tmp_path / "out"
    # The mlflow extra as absent: its module's name swapped for one no installation has.
    absent = ("import sys, optimizer.trackers as t; "
              "t.BACKENDS['mlflow'] = t.Backend('mlflow_absent_for_the_test', t.BACKENDS['mlflow'].tracker); "
              "import run_optimization; from services.errors import exit_on_user_error; "
              "exit_on_user_error(lambda: run_optimization.main(sys.argv[1:]))")
    run = ["--domain", "imo_grading", "--output_dir", str(out)]
    for argv, said in (([sys.executable, "-c", absent, *run, "--track", "tensorboard", "--track", "mlflow"],
                        'error: --track mlflow: mlflow_absent_for_the_test not installed; pip install -e ".[mlflow]"'),
                       ([sys.executable, "-m", "run_optimization", *run, "--track", "wandb,neptune"],
                        "error: tracking.backends must be a list of distinct trackers among mlflow, wandb, "
                        "tensorboard, got ['wandb', 'neptune']")):
        r = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stderr.strip()) == (2, said)
        assert not out.exists()


def test_each_tracker_a_run_can_choose_is_registered_with_a_tracker_class_that_loads():
    """The config's choices and the registry name the same backends, and each names a class that
    exists and has the Tracker methods (all three extras are installed for the tests)."""
    from optimizer.trackers import BACKENDS
    from services.config_values import TRACKERS

    assert sorted(BACKENDS) == sorted(TRACKERS)
    for name, backend in BACKENDS.items():
        cls = backend.load()
        assert all(callable(getattr(cls, m, None)) for m in ("start", "node", "best", "finish")), name
