"""Adversarial tests of the sandbox backends: agent code that tries to get out.

Each attack runs in every isolating backend available here (bwrap always in CI;
docker when an engine and the image are there) and, where it shows that the test
can fail, once more with the `none` backend, where the same attack succeeds.
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from services.config import PROJECT_ROOT, SandboxConfig
from services.sandbox import open_sandbox
from services.sandbox.base import WORKSPACE
from support.backends import BACKENDS, VAL_LABELS
from support.little_servers import GATEWAY_SAYS, HOST_SAYS, host_http_server, unix_http_server


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


def run_python(box, code: str, timeout: float = 30, env=None, **kwargs):
    return box.run([box.python, "-c", textwrap.dedent(code)], {**box.base_env(), **(env or {})}, timeout=timeout,
                   **kwargs)


@pytest.fixture
def host_listener():
    """An HTTP server on the host's 127.0.0.1 that sandboxed code must not reach."""
    with host_http_server() as port:
        yield port


SNOOP = """
import glob, os
found = []
for path in [{labels!r}, {dotenv!r}]:
    try:
        open(path).read(10)
        found.append("read " + os.path.basename(path))
    except OSError:
        pass
for environ in glob.glob("/proc/*/environ"):
    try:
        if b"{secret}" in open(environ, "rb").read():
            found.append("secret in " + environ)
    except OSError:
        pass
if "{secret}" in str(os.environ):
    found.append("secret in my environment")
print(found)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_labels_dotenv_and_host_environments_are_out_of_reach(backend, workspace, tmp_path):
    secret = "sk-host-secret-4242424242"
    # A host process holding a provider key in its environment, as the gateway's does.
    holder = subprocess.Popen(["sleep", "60"], env={"OPENAI_API_KEY": secret})
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"OPENAI_API_KEY={secret}\n")
    code = SNOOP.format(labels=str(VAL_LABELS), dotenv=str(dotenv), secret=secret)
    try:
        with open_sandbox(SandboxConfig(), workspace, backend=backend) as box:
            result = run_python(box, code)
        # The same code outside a sandbox finds them all: the probe works.
        with open_sandbox(SandboxConfig(), workspace, backend="none") as box:
            control = run_python(box, code)
    finally:
        holder.kill()
        holder.wait()
    assert result.ok, result.stderr
    assert result.stdout.strip() == "[]"
    assert "read gradingbench_filtered_100_val.csv" in control.stdout and "read .env" in control.stdout
    assert "secret in /proc/" in control.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_network_but_the_gateway_relay(backend, workspace, host_listener):
    with unix_http_server() as sock, \
            open_sandbox(SandboxConfig(), workspace, gateway_socket=sock, backend=backend) as box:
        code = f"""
            import urllib.request
            def get(url):
                try:
                    return urllib.request.urlopen(url, timeout=5).read().decode()
                except Exception as e:
                    return type(e).__name__
            print(get("http://127.0.0.1:{host_listener}/"), "|", get("{box.gateway_url}/health"))
        """
        result = run_python(box, code)
    assert result.ok, result.stderr
    host, gateway = [part.strip() for part in result.stdout.split("|")]
    assert host != HOST_SAYS and gateway == GATEWAY_SAYS
    with open_sandbox(SandboxConfig(), workspace, backend="none") as box:
        assert HOST_SAYS in run_python(box, code).stdout


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_land_only_in_the_workspace(backend, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    code = f"""
        import os, sys
        wrote = []
        for path in ["{outside}/x", "/usr/x", "{Path(sys.executable).parent}/x", "{WORKSPACE}/ok"]:
            try:
                open(path, "w").write("x")
                wrote.append(path)
            except OSError:
                pass
        print(wrote)
    """
    with open_sandbox(SandboxConfig(), workspace, backend=backend) as box:
        result = run_python(box, code)
    assert result.stdout.strip() == f"['{WORKSPACE}/ok']", result.stderr
    assert (workspace / "ok").read_text() == "x" and not list(outside.iterdir())
    assert not Path("/usr/x").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_bomb_is_contained_and_killed(backend, workspace):
    config = SandboxConfig(pids=64)
    with open_sandbox(config, workspace, backend=backend) as box:
        started = time.monotonic()
        result = run_python(box, """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        """, timeout=4)
    assert result.timed_out and time.monotonic() - started < 20
    # The host can still start processes, and nothing of the bomb is left.
    assert subprocess.run(["true"]).returncode == 0


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_cpu_and_output_limits(backend, workspace):
    with open_sandbox(SandboxConfig(memory_mb=1024), workspace, backend=backend) as box:
        memory = run_python(box, "x = bytearray(8 * 2**30)")
        spin = run_python(box, "while True: pass", timeout=2)
        started = time.monotonic()
        flood = run_python(box, "import sys\nwhile True: sys.stdout.write('x' * 65536)", output_cap=2**20)
        flood_s = time.monotonic() - started
    assert not memory.ok and ("MemoryError" in memory.stderr or memory.returncode in (-9, 137))
    assert spin.timed_out and spin.seconds < 10
    assert flood.output_capped and len(flood.stdout) == 2**20 and flood_s < 10


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_process_outlives_the_sandbox(backend, workspace):
    marker = "4321.5"  # an odd sleep length that names our process on the host
    with open_sandbox(SandboxConfig(), workspace, backend=backend) as box:
        script = f"(setsid sleep {marker} &) ; (nohup sleep {marker} >/dev/null 2>&1 &) ; echo started"
        result = box.run(["sh", "-c", script],
                         box.base_env(), timeout=10)
        assert result.stdout.strip() == "started"
        proc = box.popen(["sleep", marker], box.base_env())
    assert proc.poll() is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _processes_with(marker):
        time.sleep(0.1)
    assert not _processes_with(marker)


def _processes_with(needle: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmd and "sh -c" not in cmd:
            found.append(int(pid))
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_popen_speaks_json_lines_and_env_is_exactly_what_was_given(backend, workspace, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak-123456")
    with open_sandbox(SandboxConfig(), workspace, backend=backend) as box:
        proc = box.popen([box.python, "-c", textwrap.dedent("""
            import json, os, sys
            for line in sys.stdin:
                print(json.dumps({"echo": json.loads(line), "env": sorted(os.environ)}), flush=True)
        """)], {**box.base_env(), "ONLY_THIS": "1"})
        proc.stdin.write('{"id": 1}\n')
        proc.stdin.flush()
        answer = proc.stdout.readline()
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    import json

    reply = json.loads(answer)
    assert reply["echo"] == {"id": 1}
    assert "ONLY_THIS" in reply["env"] and "OPENAI_API_KEY" not in reply["env"]


def test_auto_never_falls_back_to_no_sandbox(monkeypatch):
    from services.errors import UserError
    from services.sandbox import bwrap as bwrap_module
    from services.sandbox import choose_backend

    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap on PATH
    bwrap_module.bwrap_unavailable.cache_clear()
    config = SandboxConfig(backend="auto", docker_host="unix:///nonexistent/docker.sock")
    try:
        with pytest.raises(UserError, match="no sandbox works here"):
            choose_backend(config)
    finally:
        bwrap_module.bwrap_unavailable.cache_clear()


def test_bad_sandbox_choice_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "domains.harness", "--domain", "imo_grading", "--sandbox", "chroot"],
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "invalid choice: 'chroot'" in r.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sandbox:\n  backend: chroot\n")
    r = subprocess.run([sys.executable, "-m", "domains.harness", "--domain", "imo_grading", "--config", str(cfg)],
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "sandbox.backend" in r.stderr
