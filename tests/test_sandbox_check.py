"""`python -m services.sandbox check`: every backend's state with why, the one a run takes, and exit 2
when none works. Run as a user does, with what the machine offers changed through the environment (a
Docker host that does not answer, a PATH without bubblewrap)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from support.backends import docker_ready
from support.cli import REPO_ROOT

pytestmark = pytest.mark.e2e  # each test starts the command, which imports Docker's client (seconds)
NO_ENGINE = "unix:///nonexistent/docker.sock"


def check(tmp_path, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    return subprocess.run([sys.executable, "-m", "services.sandbox", "check"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120, env={**base, "PYTHONPATH": str(REPO_ROOT), **env})


def states(stdout: str) -> dict[str, str]:
    """Backend name -> its state line (after the name)."""
    return {line.split()[0]: line.split(None, 1)[1] for line in stdout.splitlines()
            if line.split() and line.split()[0] in ("docker", "bwrap", "none", "ray")}


def test_each_backend_is_listed_with_why_and_the_one_a_run_takes(tmp_path):
    r = check(tmp_path, DOCKER_HOST=NO_ENGINE)
    assert r.returncode == 0, r.stderr
    found = states(r.stdout)
    assert list(found) == ["docker", "bwrap", "none", "ray"]
    assert found["docker"].startswith(f"not usable: no Docker engine answers at {NO_ENGINE}: ")
    assert found["bwrap"].startswith("works: ")
    assert "only when asked for (--sandbox none)" in found["none"]
    ray = "installed (ray " if importlib.util.find_spec("ray") else "not installed"
    assert found["ray"].startswith(ray)
    # Then each coding agent: on the working backend (bwrap), its version asked in a sandbox, or how to install it.
    agents = [line for line in r.stdout.splitlines() if line.startswith("meta agent ")]
    assert [line.split()[2].rstrip(":") for line in agents] == ["claude-code", "codex", "mini-swe-agent"]
    for line in agents:
        assert line.split(": ", 1)[1].startswith(("bwrap: runs (", "not installed (python -m services.install "
                                                                  "--coding-agents)")), line
    assert r.stdout.splitlines()[-1].startswith("a run takes bwrap ")


def test_no_backend_that_works_is_exit_2_after_each_ones_reason(tmp_path):
    r = check(tmp_path, DOCKER_HOST=NO_ENGINE, PATH=str(tmp_path))  # no bwrap on this PATH
    assert r.returncode == 2
    found = states(r.stdout)
    assert found["docker"].startswith("not usable: ") and found["bwrap"] == (
        "not usable: bubblewrap is not installed (apt-get install bubblewrap)")
    assert "a run takes" not in r.stdout
    assert r.stderr.strip() == ("error: no sandbox works here (see above): start a Docker engine or install "
                                "bubblewrap; --sandbox none runs agent code unsandboxed")


@pytest.mark.skipif(bool(docker_ready()), reason=f"docker: {docker_ready()}")
def test_an_engine_that_answers_is_what_a_run_takes(tmp_path):
    r = check(tmp_path, **({"DOCKER_HOST": os.environ["DOCKER_HOST"]} if "DOCKER_HOST" in os.environ else {}))
    assert r.returncode == 0, r.stderr
    assert states(r.stdout)["docker"].startswith("works: an engine answers at ")
    assert " present" in states(r.stdout)["docker"]
    assert r.stdout.splitlines()[-1].startswith("a run takes docker ")
