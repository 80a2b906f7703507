"""The docker backend against a real engine: isolation, limits, kill paths and cleanup.

Skipped when no engine answers (DOCKER_HOST or the default socket) or the image is
missing; `.ci/docker.sh` starts a private engine and builds the image.
"""

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import docker
import pytest

from services.config import SandboxConfig
from services.sandbox.base import Mount
from services.sandbox.docker_backend import (
    LABEL,
    DockerSandbox,
    connect,
    engine_available,
)
from support.little_servers import GATEWAY_SAYS, unix_http_server

CONFIG = SandboxConfig(memory_mb=512, pids=64, cpus=1.0, tmp_mb=64, output_cap_mb=1)

_why_not = engine_available(CONFIG)
if _why_not:
    pytest.skip(_why_not, allow_module_level=True)
_client = connect(CONFIG)
try:
    _client.images.get(CONFIG.docker_image)
except docker.errors.ImageNotFound:
    pytest.skip(f"image {CONFIG.docker_image} missing: python -m services.sandbox build-image",
                allow_module_level=True)
finally:
    _client.close()


@pytest.fixture(scope="module")
def client():
    client = connect(CONFIG)
    yield client
    client.close()


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def sandbox(workspace):
    with DockerSandbox(workspace, CONFIG) as sb:
        yield sb


def py(sb, code: str) -> list[str]:
    return [sb.python, "-c", code]


def container_pids(container_id: str, command: str) -> list[int]:
    """Host pids of the container's processes whose command line is `command`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and container_id in (entry / "cgroup").read_text()
                    and (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip() == command.encode()):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_workspace_is_shared_and_given_back(workspace):
    (workspace / "in.txt").write_text("from the host")
    with DockerSandbox(workspace, CONFIG) as sb:
        r = sb.run(["sh", "-c", "pwd; cat in.txt; echo from inside > /workspace/out.txt"], {"PATH": "/usr/bin"})
        assert r.ok, r
        assert r.stdout == "/workspace\nfrom the host"
    assert (workspace / "out.txt").read_text() == "from inside\n"
    for path in (workspace, workspace / "in.txt", workspace / "out.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid())


def test_files_the_host_adds_after_open_become_writable_inside(workspace):
    with DockerSandbox(workspace, CONFIG) as sb:
        (workspace / "pkg").mkdir()
        (workspace / "pkg" / "late.txt").write_text("written by the host after the container started")
        sb.adopt(workspace)
        r = sb.run(["sh", "-c", "echo edited >> pkg/late.txt && touch pkg/new.txt"], {"PATH": "/usr/bin"})
        assert r.ok, r
    assert (workspace / "pkg" / "late.txt").read_text().endswith("edited\n")
    for path in (workspace / "pkg", workspace / "pkg" / "late.txt", workspace / "pkg" / "new.txt"):
        assert path.stat().st_uid == os.getuid()


@pytest.mark.e2e
def test_a_loop_generation_runs_in_docker(tmp_path):
    """The loop with the docker backend: meta agent, then the evaluation worker."""
    from support.cli import FAST_CONFIG, run_loop
    from support.fake_openai import FakeOpenAI
    from support.scripted_loop import IMPROVE, responder

    config = tmp_path / "docker.yaml"
    config.write_text(FAST_CONFIG.replace("backend: bwrap", "backend: docker")
                      + "loop:\n  eval_samples: 5\n  meta_timeout_s: 120\n  skip_staged_eval: true\n")
    with FakeOpenAI() as fake:
        fake.set_responder(responder({1: [IMPROVE]}, []))
        r = run_loop(tmp_path, fake, "--max_generation", "1", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sandbox  docker" in r.stdout
    node = json.loads((tmp_path / "out" / "run" / "nodes" / "1" / "node.json").read_text())
    assert node["status"] == "ok" and node["scores"]["imo_grading"]["val"] == 1.0
    leftovers = [p for p in (tmp_path / "out").rglob("*") if p.stat().st_uid != os.getuid()]
    assert leftovers == []


def test_env_is_exactly_what_was_passed(sandbox, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    r = sandbox.run(["/usr/bin/env"], {"ONLY": "this", "TWO": "lines\nhere"})  # env prints its environ as is
    assert r.ok, r
    assert r.stdout == "ONLY=this\nTWO=lines\nhere\n"
    assert sandbox.run(["/usr/bin/env"], {}).stdout == ""


def test_runs_as_nobody_when_we_are_root(sandbox):
    r = sandbox.run(["/usr/bin/id", "-u"], {})
    assert r.stdout.strip() == str(65534 if os.geteuid() == 0 else os.getuid())


def test_no_network_not_even_the_hosts_loopback(sandbox, client):
    # Asked for explicitly: an engine started with --bridge=none would give no network by default anyway.
    assert client.containers.get(sandbox._container_id).attrs["HostConfig"]["NetworkMode"] == "none"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        code = (f"import os, socket\nprint(sorted(os.listdir('/sys/class/net')))\n"
                f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\n"
                f"except OSError as e:\n    print('refused', e)")
        r = sandbox.run(py(sandbox, code), {})
        assert r.ok, r
        assert r.stdout.splitlines()[0] == "['lo']"
        assert r.stdout.splitlines()[1].startswith("refused")
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_timeout_kills_the_command_and_its_children(sandbox):
    r = sandbox.run(["sh", "-c", "sleep 100 & echo $!; sleep 100"], {}, timeout=1)
    assert r.timed_out and r.returncode is None
    assert r.seconds < 3
    child = r.stdout.strip()
    deadline = time.monotonic() + 3
    while sandbox.run(["sh", "-c", f"kill -0 {child}"], {}).ok:  # a zombie is reaped by init soon
        assert time.monotonic() < deadline, "the background child outlived the timeout"
        time.sleep(0.05)


def test_output_cap_kills_a_flood_quickly(sandbox):
    started = time.monotonic()
    r = sandbox.run(py(sandbox, "import sys\nfor _ in range(3200): sys.stdout.write('x' * 65536)"), {}, timeout=60)
    assert r.output_capped and not r.ok
    assert len(r.stdout) <= 2**20
    assert time.monotonic() - started < 15


def test_fork_bomb_is_contained_and_the_sandbox_recovers(sandbox):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    r = sandbox.run(py(sandbox, bomb), {}, timeout=3)
    assert r.timed_out
    assert r.seconds < 10
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes
    deadline = time.monotonic() + 10
    while not (after := sandbox.run(["true"], {})).ok:  # its processes are being reaped
        assert time.monotonic() < deadline, after
        time.sleep(0.2)


def test_memory_limit(sandbox):
    r = sandbox.run(py(sandbox, "b = bytearray(8 * 2**30)\nprint('allocated')"), {}, timeout=60)
    assert not r.ok and "allocated" not in r.stdout
    assert sandbox.run(["true"], {}).ok


def test_only_workspace_tmp_and_writable_mounts_are_writable(sandbox):
    for path in ("/etc/x", "/usr/x", "/x", "/opt/hyperagents/x"):
        r = sandbox.run(["sh", "-c", f"echo no > {path}"], {})
        assert r.returncode != 0, path
    assert sandbox.run(["sh", "-c", "echo ok > /tmp/x && echo ok > $HOME/x"], {"HOME": "/home/sandbox"}).ok
    assert not (Path("/etc/x").exists() or Path("/usr/x").exists())


def test_mounts_read_only_and_writable(tmp_path, workspace):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    (data / "a.txt").write_text("A")
    mounts = [Mount(data, "/data"), Mount(out, "/out", writable=True)]
    with DockerSandbox(workspace, CONFIG, mounts=mounts) as sb:
        assert sb.run(["cat", "/data/a.txt"], {}).stdout == "A"
        assert sb.run(["sh", "-c", "echo x > /data/b.txt"], {}).returncode != 0
        assert sb.run(["sh", "-c", "echo x > /out/b.txt"], {}).ok
        assert sb.inside(data / "a.txt") == "/data/a.txt"
    assert (out / "b.txt").stat().st_uid == os.getuid()
    assert not (data / "b.txt").exists()


def test_no_container_remains_after_close(client, workspace):
    with DockerSandbox(workspace, CONFIG) as sb:
        name = sb._container_name
        assert [c.name for c in client.containers.list(filters={"name": name, "label": LABEL})] == [name]
    assert client.containers.list(all=True, filters={"name": name}) == []
    sb.close()  # idempotent


def test_no_container_remains_after_ctrl_c(client, workspace):
    with pytest.raises(KeyboardInterrupt):
        with DockerSandbox(workspace, CONFIG) as sb:
            name = sb._container_name
            sb.popen(["sleep", "100"], {})
            raise KeyboardInterrupt
    assert client.containers.list(all=True, filters={"name": name}) == []


@pytest.mark.e2e
def test_ctrl_c_while_closing_still_removes_the_container(client, workspace, monkeypatch):
    from services.sandbox import base

    sb = DockerSandbox(workspace, CONFIG).open()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(base.Sandbox, "close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sb.close()
    assert client.containers.list(all=True, filters={"name": sb._container_name}) == []
    assert workspace.stat().st_uid == os.getuid()


def test_background_process_does_not_outlive_close(workspace):
    with DockerSandbox(workspace, CONFIG) as sb:
        assert sb.run(["sh", "-c", "sleep 1000 >/dev/null 2>&1 &"], {}).ok
        container_id = sb._container_id
        assert container_pids(container_id, "sleep 1000")
    assert container_pids(container_id, "sleep 1000") == []


def test_json_lines_over_stdin_and_stdout(sandbox):
    echo = "import json, sys\nfor line in sys.stdin:\n    print(json.dumps({'got': json.loads(line)}), flush=True)"
    proc = sandbox.popen(py(sandbox, echo), {})
    for i in range(3):
        proc.stdin.write(json.dumps({"row": i}) + "\n")
        assert json.loads(proc.stdout.readline()) == {"got": {"row": i}}
    proc.stdin.close()  # EOF ends the loop
    assert proc.wait(timeout=10) == 0
    assert proc.stdout.read() == "" and proc.stderr.read() == ""


def test_unread_output_holds_nothing_after_close(workspace):
    with DockerSandbox(workspace, CONFIG) as sb:
        proc = sb.popen(["sh", "-c", "head -c 1000000 /dev/zero"], {})  # far more than a pipe holds
        assert proc.wait(timeout=10) == 0
        assert proc._demux.is_alive()  # its output waits for a reader
    proc._demux.join(2)
    assert not proc._demux.is_alive()


def test_popen_kill_and_wait_timeout(sandbox):
    proc = sandbox.popen(["sleep", "100"], {})
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.kill()
    assert proc.wait(timeout=5) == 137
    assert proc.poll() == 137


def test_commands_run_concurrently(sandbox):
    results = {}

    def one(i):
        results[i] = sandbox.run(["sh", "-c", f"sleep 0.5; echo {i}; echo e{i} >&2"], {})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - started < 4
    assert {i: (r.stdout, r.stderr, r.returncode) for i, r in results.items()} == {
        i: (f"{i}\n", f"e{i}\n", 0) for i in range(8)}


def test_gateway_relay(workspace):
    with unix_http_server() as gateway_socket, DockerSandbox(workspace, CONFIG, gateway_socket=gateway_socket) as sb:
        assert sb.gateway_url == "http://127.0.0.1:18080/v1"
        code = "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:18080/health').read().decode())"
        for _ in range(2):  # one relay, started with the container, serves every command
            r = sb.run(py(sb, code), {})
            assert r.ok, r
            assert r.stdout == GATEWAY_SAYS + "\n"


def test_a_full_image_brings_its_own_python(client, workspace):
    from services.sandbox.image import host_python_rootfs

    tag = "hyperagents-test-full:latest"
    client.api.import_image_from_data(host_python_rootfs(), repository=tag.split(":")[0], tag="latest",
                                      changes=["LABEL hyperagents.python=/opt/py/bin/python"])
    config = SandboxConfig(docker_image=tag)
    try:
        with DockerSandbox(workspace, config, mounts=[Mount(Path("/usr"), "/usr")]) as sb:
            assert sb.python == "/opt/py/bin/python"
            assert sb.run(["true"], {}).ok
            assert not sb.run(["test", "-e", "/etc/ssl"], {}).ok  # nor is what the host's Python needs
    finally:
        client.images.remove(tag, force=True)


def test_engine_available_says_why_not():
    reason = engine_available(SandboxConfig(docker_host="unix:///nonexistent/docker.sock"))
    assert reason and "\n" not in reason


def test_missing_image_is_a_user_error(workspace):
    from services.errors import UserError

    config = SandboxConfig(docker_image="hyperagents-no-such-image:latest")
    with pytest.raises(UserError, match="build-image"):
        with DockerSandbox(workspace, config):
            pass


def test_auto_builds_the_image_when_the_engine_has_none(client):
    from services.sandbox import choose_backend

    tag = "hyperagents-test-auto:latest"
    config = SandboxConfig(backend="auto", docker_image=tag)
    try:
        assert choose_backend(config) == "docker"
        assert client.images.get(tag).labels["hyperagents.python"] == "host"
    finally:
        client.images.remove(tag, force=True)
