"""Docker containers that outlive their run: a run killed with -9 cannot remove its own, so the
next run (and `python -m services.sandbox check`) must, and only those whose maker is surely gone.

Skipped, with the reason, where no Docker engine answers or the image is missing
(`.ci/docker.sh` starts a private engine and builds it)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from docker.types import Mount

from services.config import SandboxConfig
from services.sandbox.leftovers import LABEL, LABEL_START, LABEL_UID, creator_labels
from support.backends import docker_ready
from support.cli import FAST_CONFIG, cli_env, run_cli
from support.scripted_loop import start_and_kill_when

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

_why_not = docker_ready()
if _why_not:
    pytest.skip(f"docker: {_why_not}", allow_module_level=True)

IMAGE = SandboxConfig().docker_image


@pytest.fixture
def client():
    client = docker.from_env()
    yield client
    client.close()


def ours(client, pid: int | None = None, below: Path | None = None) -> list:
    """Our containers (made by `pid`, if given; with a mount from under `below`, if given: test files
    running at the same time have containers of their own)."""
    wanted = LABEL if pid is None else f"{LABEL}={pid}"
    found = client.containers.list(all=True, filters={"label": wanted})
    if below is None:
        return found
    return [c for c in found
            if any(str(m.get("Source", "")).startswith(str(below)) for m in c.attrs.get("Mounts") or [])]


def removed_before(client, ids: list[str], moment: int) -> bool:
    """Whether every one of these containers was destroyed before `moment` (seconds since the epoch),
    as the engine's events say."""
    gone = set()
    for event in client.events(since=moment - 3600, until=moment, decode=True,
                               filters={"type": "container", "event": "destroy"}):
        gone.add(event.get("id") or event.get("Actor", {}).get("ID"))
    return bool(ids) and set(ids) <= gone


def start_container(client, name: str, labels: dict) -> None:
    """A container that runs until removed, labelled as `labels` say (the image borrows the host's /usr)."""
    client.containers.run(IMAGE, ["/usr/bin/sleep", "infinity"], name=name, labels=labels, detach=True,
                          network_mode="none", mounts=[Mount("/usr", "/usr", type="bind", read_only=True)])


@pytest.mark.attack("docker: a run killed with -9 mid-evaluation leaves its evaluation container running "
                    "(relay serving the dead run's socket folder, workspace mounted); the resume removes it")
def test_a_killed_runs_container_is_removed_by_the_resume(tmp_path, fake_openai, client):
    fake_openai.latency = 0.3  # the initial evaluation lasts long enough to be killed in
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("backend: bwrap", "backend: docker")
                      + "loop:\n  eval_samples: 6\n  skip_staged_eval: true\n")
    run_dir = tmp_path / "out" / "run"
    args = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run", "--task_model",
            "openai/fake", "--meta_model", "openai/fake-meta", "--config", str(config), "--max_generation", "0"]
    before = {c.id for c in ours(client, below=tmp_path)}
    seen = []

    def evaluating(d):
        seen[:] = [c for c in ours(client, below=tmp_path) if c.id not in before and c.status == "running"]
        return (d / "evals").exists() and bool(seen)

    start_and_kill_when(tmp_path, fake_openai, args, evaluating, timeout=300)
    assert not (run_dir / "nodes" / "initial" / "node.json").exists(), "killed too late: the node was recorded"
    left = [c.id for c in seen]
    for container in seen:
        container.reload()
        assert container.status == "running"  # what the kill leaves behind
    resumed_at = int(time.time())
    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    # Test files run side by side, and any run's start removes every container whose maker is gone: one
    # may have removed ours before the resume began. Else the resume must have removed it, and said so.
    if not removed_before(client, left, resumed_at):
        assert "removed the sandbox container" in r.stderr
    remaining = {c.id for c in ours(client, below=tmp_path)}
    assert not remaining & set(left), "the killed run's container is still there"
    assert remaining <= before, "the resumed run left a container"
    assert (run_dir / "nodes" / "initial" / "node.json").exists()


@pytest.mark.attack("docker: containers with the project's label whose maker's pid now belongs to another program "
                    "(removed), of a live maker, of another user, or without the maker's start time (all kept)")
def test_only_containers_whose_maker_is_gone_are_removed(client):
    mine = creator_labels()
    # pid 1 lives, but it is not the process that made this container: it started at another time.
    cases = {"reused": {**mine, LABEL: "1", LABEL_START: "999999999"},
             "live": mine,
             "other-user": {**mine, LABEL: "1", LABEL_START: "999999999", LABEL_UID: str(os.getuid() + 4242)},
             "no-start": {LABEL: "1"}}
    names = {case: f"hyperagents-test-{case}-{os.getpid()}" for case in cases}
    try:
        for case, labels in cases.items():
            start_container(client, names[case], labels)
        reused = client.containers.get(names["reused"]).id
        r = subprocess.run([sys.executable, "-m", "services.sandbox", "check"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        present = {c.name for c in client.containers.list(all=True)}
        # Another test file's run starting side by side may sweep it first (every start removes dead makers').
        assert names["reused"] not in present
        assert names["reused"] in r.stderr or removed_before(client, [reused], int(time.time()) + 1)
        assert {names["live"], names["other-user"], names["no-start"]} <= present
    finally:
        for name in names.values():
            try:
                client.api.remove_container(name, force=True)
            except docker.errors.NotFound:
                pass


def test_a_dry_run_builds_no_image_and_says_it_would(tmp_path, client):
    tag = f"hyperagents-dry-run-{os.getpid()}:none"
    config = tmp_path / "c.yaml"
    config.write_text(f"sandbox:\n  backend: docker\n  docker_image: {tag}\n")
    before = {c.id for c in ours(client, below=tmp_path)}
    r = run_cli("run_optimization", "--domain", "imo_grading", "--config", str(config), "--dry_run",
                "--output_dir", str(tmp_path / "out"), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sandbox  docker (its image would be built first)" in r.stdout
    assert "dry run: nothing started" in r.stdout
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(tag)
    assert {c.id for c in ours(client, below=tmp_path)} == before and not (tmp_path / "out").exists()
