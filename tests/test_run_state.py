"""One status vocabulary (archive/run_state.py) on the console, report.html and the dashboard;
the page of a node in flight; where apps.analyze writes by default."""

import json
import os
import socket
import subprocess
import sys

import pytest

from apps.dashboard import pages
from apps.dashboard.reader import RunReader, in_flight_of
from apps.report import write_report
from archive.run_state import Phase, RunState
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli, run_loop
from support.dashboard import get, serving
from support.small_runs import write_run
from support.synthetic_run import make_run


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def append_start(run_dir, pid: int) -> None:
    with open(run_dir / "archive.jsonl", "a") as f:
        f.write(json.dumps({"event": "run_start", "time": "2026-01-01T00:00:00", "schema_version": 1, "pid": pid,
                            "host": socket.gethostname()}) + "\n")


def words_of(run_dir, fake_openai, tmp_path) -> tuple[str, str, str]:
    """The status on the console (the plan of a dry resume), in report.html and on the dashboard."""
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--dry_run", env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr[-2000:]
    console = next(line for line in r.stdout.splitlines() if line.startswith("run "))
    report = write_report(run_dir, tmp_path / "report.html").read_text()
    data = RunReader(run_dir).read()
    dashboard = pages.index([(run_dir.name, data)], "v")
    return console, report, dashboard + data.status


@pytest.mark.e2e
def test_the_same_status_word_everywhere(tmp_path, fake_openai):
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 3\n  skip_staged_eval: true\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    assert "run finished" in r.stdout.splitlines()
    assert "finished" in (run_dir / "report.html").read_text()
    console, report, dashboard = words_of(run_dir, fake_openai, tmp_path)
    assert "it was finished" in console and ">finished<" in report and ">finished<" in dashboard

    append_start(run_dir, dead_pid())  # a run killed with -9 writes no run_end
    console, report, dashboard = words_of(run_dir, fake_openai, tmp_path)
    assert "it was interrupted" in console and "interrupted" in report and ">interrupted<" in dashboard
    assert RunReader(run_dir).read().state == RunState.INTERRUPTED

    append_start(run_dir, os.getpid())  # a process that lives
    console, report, dashboard = words_of(run_dir, fake_openai, tmp_path)
    assert "it was running" in console and "running" in report and ">running<" in dashboard
    assert "while the run was running" in report
    for word in ("stopped", "finished", "interrupted"):
        assert f">{word}<" not in dashboard


def test_the_initial_node_in_flight_is_being_evaluated():
    start = {"event": "gen_start", "node_id": "initial", "parent": None, "generation": 0, "schema_version": 1}
    child = {"event": "gen_start", "node_id": "1", "parent": "initial", "generation": 1, "schema_version": 1}
    flights = {f.node_id: f.phase for f in in_flight_of([start, child], {})}
    assert flights == {"initial": Phase.EVALUATING, "1": Phase.META}
    assert str(Phase.EVALUATING) == "evaluating"


@pytest.fixture
def in_flight_server(tmp_path):
    made = make_run(tmp_path / "runs" / "live", nodes=4, in_flight=2)
    with serving(tmp_path / "runs") as port:
        yield port, made


def test_a_node_in_flight_has_a_page(in_flight_server):
    port, made = in_flight_server
    for node_id in made["in_flight"]:
        status, _, body = get(port, f"/runs/live/nodes/{node_id}")
        assert status == 200, body
        assert f"Node {node_id} (in flight)" in body and "Meta agent transcript, so far" in body
    evaluating = made["evaluating"]
    _, _, body = get(port, f"/runs/live/nodes/{evaluating}")
    assert "in flight: evaluating" in body and "Rows done so far" in body
    _, _, run_page = get(port, "/runs/live")
    assert f'href="/runs/live/nodes/{evaluating}"' in run_page
    assert get(port, "/runs/live/nodes/99999")[0] == 404


def test_analyze_writes_beside_the_runs_by_default(tmp_path):
    write_run(tmp_path / "outputs" / "r", 0, [0.1, 0.3])
    elsewhere = tmp_path / "checkout"
    elsewhere.mkdir()
    r = subprocess.run([sys.executable, "-m", "apps.analyze", str(tmp_path / "outputs" / "r"), "--k", "1"],
                       cwd=elsewhere, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "outputs" / "analysis" / "analysis.md").is_file()
    assert not any(elsewhere.iterdir()) and not (tmp_path / "outputs" / "r" / "analysis").exists()
