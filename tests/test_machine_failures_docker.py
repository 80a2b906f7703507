"""A failure of this machine, continued from tests/test_machine_failures.py (a file of its own so that the suite's
workers share the slow runs): the Docker engine stopped mid-evaluation, and the sandbox image removed mid-run, on
a private engine of the test's own; each run stops as this machine's failure and a resume ends it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from support.cli import REPO_ROOT, cli_env, run_cli
from support.fake_openai import FakeOpenAI
from support.waiting import wait_for
from test_machine_failures import (
    archive_of,
    finished_rows,
    loop_args,
    loop_config,
    nodes,
    reference_run,
    resumed,
    script,
    stopped_line,
    task_calls_paid,
)


class PrivateEngine:
    """A Docker engine of the test's own (as .ci/docker.sh starts one: no bridge network), with the sandbox
    image built: this test stops it, which no other test's engine may be."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = f"unix://{root}/docker.sock"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import docker

        log = (self.root / "dockerd.log").open("a")
        self.proc = subprocess.Popen(["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false",
                                      "--ip-masq=false", "--data-root", str(self.root / "data"), "--exec-root",
                                      str(self.root / "exec"), "--pidfile", str(self.root / "dockerd.pid"), "-H",
                                      self.host], stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while True:
            try:
                docker.DockerClient(base_url=self.host, timeout=2).ping()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log_end = (self.root / "dockerd.log").read_text()[-500:]
                    raise RuntimeError(f"dockerd did not start: {log_end}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # as `systemctl stop docker` does
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def private_engine():
    if os.geteuid() != 0 or not shutil.which("dockerd"):
        pytest.skip("a Docker engine of the test's own needs root and dockerd (.ci/docker.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="hyperagents-dockerd-", dir="/tmp"))  # a socket path within 108 bytes
    engine = PrivateEngine(root)
    try:
        try:
            engine.start()
        except RuntimeError as e:
            pytest.skip(str(e))
        r = run_cli("services.sandbox", "build-image", env={**os.environ, "DOCKER_HOST": engine.host})
        if r.returncode != 0:
            pytest.skip(f"the sandbox image could not be built: {r.stderr[-300:]}")
        yield engine
    finally:
        engine.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.e2e
def test_the_docker_engine_stopped_mid_evaluation_stops_the_run_and_a_resume_ends_as_an_uninterrupted_run(
        tmp_path, private_engine):
    config = loop_config(tmp_path)
    docker_config = tmp_path / "docker.yaml"
    docker_config.write_text(Path(config).read_text().replace("backend: bwrap", "backend: docker"))
    run_dir = tmp_path / "out" / "run"
    started = time.monotonic()
    with FakeOpenAI(script(), latency=0.3) as server, (tmp_path / "run.err").open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "run_optimization",
                                 *loop_args(tmp_path / "out", str(docker_config))], cwd=REPO_ROOT,
                                env=cli_env(server, TQDM_DISABLE="1", DOCKER_HOST=private_engine.host),
                                stdout=subprocess.DEVNULL, stderr=err_file)
        try:
            wait_for(lambda: proc.poll() is not None or len(finished_rows(run_dir)) >= 3, 300, "3 rows")
            private_engine.stop()  # its containers go with it, the worker's rows in flight among them
            code = proc.wait(300)
        finally:
            proc.kill()
    stopped_s = time.monotonic() - started
    err = (tmp_path / "run.err").read_text()
    line = stopped_line(code, err, run_dir)
    assert line.startswith(f"stopped: the Docker engine stopped during the run: no Docker engine answers at "
                           f"{private_engine.host}: "), line
    assert nodes(run_dir) == {}  # the node under evaluation is not recorded
    before = finished_rows(run_dir)
    assert before and all(not rec["error"] for rec in before.values())

    private_engine.start()  # the same engine again, its image kept
    started = time.monotonic()
    r = resumed(line, DOCKER_HOST=private_engine.host)
    resumed_s = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sandbox  docker" in r.stdout
    assert {k: v for k, v in finished_rows(run_dir).items() if k in before} == before
    reference = reference_run(tmp_path, config)
    assert archive_of(run_dir) == archive_of(reference) and set(archive_of(run_dir)) == {"initial", "1"}
    assert task_calls_paid(reference) <= task_calls_paid(run_dir) <= task_calls_paid(reference) + 7
    print(f"docker engine stopped: stopped after {stopped_s:.1f} s, resumed in {resumed_s:.1f} s")


@pytest.mark.e2e
def test_the_sandbox_image_removed_mid_run_stops_the_run_at_its_next_sandbox(tmp_path, private_engine):
    import docker

    config = tmp_path / "docker.yaml"
    config.write_text(Path(loop_config(tmp_path)).read_text().replace("backend: bwrap", "backend: docker"))
    run_dir = tmp_path / "out" / "run"
    with FakeOpenAI(script(), latency=0.3) as server, (tmp_path / "run.err").open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *loop_args(tmp_path / "out", str(config))],
                                cwd=REPO_ROOT, env=cli_env(server, TQDM_DISABLE="1", DOCKER_HOST=private_engine.host),
                                stdout=subprocess.DEVNULL, stderr=err_file)
        try:
            wait_for(lambda: proc.poll() is not None or len(finished_rows(run_dir)) >= 1, 300, "a row")
            client = docker.DockerClient(base_url=private_engine.host)
            tag = "hyperagents-sandbox:latest"
            client.images.remove(tag, force=True)  # the running container keeps it: the next sandbox has none
            code = proc.wait(300)
        finally:
            proc.kill()
    err = (tmp_path / "run.err").read_text()
    line = stopped_line(code, err, run_dir)
    assert line.startswith(f"stopped: docker image {tag} was removed during the run: build it with "
                           "`python -m services.sandbox build-image`; "), line
    assert set(nodes(run_dir)) == {"initial"}  # evaluated in the container it had; generation 1 is not recorded
    assert run_cli("services.sandbox", "build-image", env={**os.environ, "DOCKER_HOST": private_engine.host}
                   ).returncode == 0
    r = resumed(line, DOCKER_HOST=private_engine.host)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {n["status"] for n in nodes(run_dir).values()} == {"ok"} and set(nodes(run_dir)) == {"initial", "1"}
