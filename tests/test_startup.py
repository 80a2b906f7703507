"""Start-up costs that are deferred or overlapped must still give the same results."""

import subprocess
import sys
import textwrap

from conftest import REPO_ROOT

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
