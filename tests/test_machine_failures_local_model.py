"""A failure of this machine, continued from tests/test_machine_failures.py (a file of its own so that the suite's
workers share the slow runs): the local model's server killed mid-run stops the run as this machine's failure,
and a resume finishes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import REPO_ROOT, cli_env
from support.fake_openai import FakeOpenAI
from support.waiting import wait_for
from test_machine_failures import finished_rows, loop_config, nodes, resumed, script, stopped_line


def _local_model_missing() -> str | None:
    from services.errors import UserError
    from services.local_model import weights_path
    from services.providers import LOCAL_DEFAULT

    try:
        weights_path(LOCAL_DEFAULT)
    except UserError as e:
        return str(e)
    return None


def serving_children(pid: int) -> list[int]:
    """Pids of the children of `pid` that run the local model's server (services/local_serve.py)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and any(part.endswith(b"local_serve.py") for part in cmdline):
            found.append(int(entry))
    return found


@pytest.mark.e2e
@pytest.mark.skipif(_local_model_missing() is not None, reason=str(_local_model_missing()))
def test_the_local_model_server_killed_mid_run_stops_the_run_and_a_resume_finishes_it(tmp_path):
    from services.providers import LOCAL_DEFAULT

    run_dir = tmp_path / "out" / "run"
    args = ["--domain_spec", str(REPO_ROOT / "examples" / "capitals" / "capitals.yaml"), "--output_dir",
            str(tmp_path / "out"), "--run_id", "run", "--task_model", LOCAL_DEFAULT, "--meta_model", "openai/fake-meta",
            "--config", loop_config(tmp_path), "--max_generation", "1", "--seed", "7"]
    started = time.monotonic()
    with FakeOpenAI(script()) as server, (tmp_path / "run.err").open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *args], cwd=REPO_ROOT,
                                env=cli_env(server, TQDM_DISABLE="1"), stdout=subprocess.DEVNULL, stderr=err_file)
        try:
            wait_for(lambda: proc.poll() is not None or len(finished_rows(run_dir)) >= 2, 300, "2 rows")
            [pid] = serving_children(proc.pid)  # started before the run, by its check of the model
            os.kill(pid, signal.SIGKILL)  # as the kernel does when memory runs out
            code = proc.wait(300)
        finally:
            proc.kill()
    stopped_s = time.monotonic() - started
    err = (tmp_path / "run.err").read_text()
    line = stopped_line(code, err, run_dir)
    assert line.startswith(f"stopped: the local model server ({LOCAL_DEFAULT}) exited with SIGKILL "
                           "(the kernel kills so when memory runs out); "), line
    assert nodes(run_dir) == {}  # the node under evaluation is not recorded
    before = finished_rows(run_dir)
    assert len(before) >= 2 and all(not rec["error"] for rec in before.values())

    started = time.monotonic()
    r = resumed(line)
    resumed_s = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(run_dir)
    assert set(found) == {"initial", "1"} and found["initial"]["status"] == "ok", found
    after = finished_rows(run_dir)
    assert {k: v for k, v in after.items() if k in before} == before  # what finished is kept, not asked again
    assert all(not rec["error"] for rec in after.values())  # no row holds the dead server's failure
    print(f"local model killed: stopped after {stopped_s:.1f} s, resumed in {resumed_s:.1f} s")
