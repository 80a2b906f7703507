"""Start-up costs that are deferred or overlapped must still give the same results."""

import subprocess
import sys
import textwrap

import pytest

from support.cli import REPO_ROOT
from support.little_servers import free_port

# In a fresh interpreter: litellm's state is per process, and the tokenizer may be loaded here already.
DEFERRED = textwrap.dedent("""
    import litellm, litellm.main as main, tiktoken
    from inside.warm_up import defer_tokenizer, warm_up

    assert warm_up(litellm, ["hosted_vllm", "openai"]) == ["hosted_vllm", "openai"]
    assert main.encoding._encoding is None, "a completion with usage loaded the tokenizer"
    text = "Count these tokens, please."
    assert main.encoding.encode(text) == tiktoken.get_encoding("cl100k_base").encode(text)
    assert main._get_encoding() is main.encoding
    assert not defer_tokenizer(litellm)  # loaded now: left alone
    print("ok")
""")


@pytest.mark.e2e
def test_the_tokenizer_loads_on_first_use_not_on_the_first_call():
    r = subprocess.run([sys.executable, "-c", DEFERRED], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=300, env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


NO_DOCKER = textwrap.dedent("""
    import sys
    from services.config import SandboxConfig
    from services.sandbox import backends

    backends.DEFAULT_DOCKER_SOCKET = sys.argv[1]
    backend, why = backends.choose_local_backend(SandboxConfig(backend="auto"))
    assert "docker" not in sys.modules, "Docker's client was imported with no engine to ask"
    print(backend, why)
""")


def test_auto_without_any_docker_socket_does_not_load_dockers_client(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", NO_DOCKER, str(tmp_path / "no.sock")], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[0] == "bwrap" and f"{tmp_path / 'no.sock'} does not exist" in r.stdout
    # Where a socket exists, Docker's client is asked (and loaded) as before.
    (tmp_path / "not-docker.sock").write_text("")
    r = subprocess.run([sys.executable, "-c", NO_DOCKER, str(tmp_path / "not-docker.sock")], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert "Docker's client was imported" in r.stderr


PROBE = textwrap.dedent("""
    import os, sys, urllib.request
    cmdline = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    reply = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=10).read().decode()
    print("relay's process" if any(a.endswith(b"relay.py") for a in cmdline) else "own process", "|", reply)
    sys.exit(3)
""")


def test_a_script_beside_the_relay_runs_in_its_process_and_others_in_their_own(tmp_path):
    from support.little_servers import GATEWAY_SAYS, unix_http_server

    relay = tmp_path / "trusted" / "relay.py"
    relay.parent.mkdir()
    relay.write_text((REPO_ROOT / "inside" / "relay.py").read_text())
    beside, elsewhere = relay.parent / "probe.py", tmp_path / "probe.py"
    for path in (beside, elsewhere):
        path.write_text(PROBE)
    with unix_http_server() as sock:
        for script, where in ((beside, "relay's process"), (elsewhere, "own process")):
            port = free_port()
            r = subprocess.run([sys.executable, str(relay), "--socket", str(sock), "--port", str(port), "--",
                                sys.executable, str(script), str(port)], capture_output=True, text=True, timeout=60)
            assert r.returncode == 3, r.stderr  # its exit code, either way
            assert [p.strip() for p in r.stdout.split("|")] == [where, GATEWAY_SAYS]
