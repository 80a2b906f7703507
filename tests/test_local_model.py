"""Running with no API key: model choice, the embedded local model, and first-run messages.

The local model tests run the real SmolLM2-135M through llama.cpp's server (the xllamacpp
wheel), started by the gateway; tests/stand_in_engine stands in for a build that crashes.
"""

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from services import local_model
from services.config import ModelsConfig
from services.errors import ModelServerExited, UserError
from services.local_model import INSTALL, LocalServer, exit_line, fit_messages
from services.providers import LOCAL_DEFAULT, check_credentials, choose_models
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from support.waiting import process_gone

LABELS = ["incorrect", "partial", "almost", "correct"]


def no_keys_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


# -- choosing models ---------------------------------------------------------------------------
@pytest.mark.parametrize("keys, task, meta", [
    (("OPENAI_API_KEY", "ANTHROPIC_API_KEY"), "openai/o4-mini", "anthropic/claude-sonnet-4-5"),
    (("OPENAI_API_KEY",), "openai/o4-mini", "openai/o4-mini"),
    (("ANTHROPIC_API_KEY",), "anthropic/claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
    ((), LOCAL_DEFAULT, LOCAL_DEFAULT),
])
def test_auto_models_follow_the_keys_that_are_set(monkeypatch, keys, task, meta):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in keys:
        monkeypatch.setenv(name, "sk-test-0123456789")
    models = ModelsConfig()
    why = choose_models(models)
    assert (models.task, models.meta) == (task, meta)
    assert all(k in why for k in keys) if keys else "no provider key is set" in why and "near chance" in why


def test_configured_models_are_kept(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    models = ModelsConfig(task="hosted_vllm/my-model", meta="openai/gpt-4.1", grader="openai/x", judge="openai/y")
    assert choose_models(models) is None and models.task == "hosted_vllm/my-model"
    models = ModelsConfig(task="hosted_vllm/my-model")
    assert "OPENAI_API_KEY" in choose_models(models)
    assert (models.task, models.meta) == ("hosted_vllm/my-model", "openai/o4-mini")


# -- fitting prompts to a small context ----------------------------------------------------------
def test_prompts_that_fit_are_left_alone():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x" * 1000}]
    assert fit_messages(messages, n_ctx=2048, max_tokens=512) == messages


def test_the_middle_of_the_longest_message_is_cut_until_all_fit():
    long = "BEGIN " + "a" * 20000 + " END"
    messages = [{"role": "system", "content": "rules " * 200}, {"role": "user", "content": long}]
    fitted = fit_messages(messages, n_ctx=2048, max_tokens=512)
    budget = int((2048 - 512) * 2.5)
    assert sum(len(m["content"]) for m in fitted) <= budget
    assert fitted[0] == messages[0]  # the shorter message is untouched
    user = fitted[1]["content"]
    assert user.startswith("BEGIN ") and user.endswith(" END") and "characters cut" in user
    assert messages[1]["content"] == long  # the caller's messages are not changed


# -- the local model, for real -------------------------------------------------------------------
def test_a_constrained_completion_with_the_local_model_through_the_gateway_gives_a_label(tmp_path, monkeypatch):
    from services.config import Config
    from services.gateway import open_gateway

    config = Config()
    gateway = open_gateway(config, tmp_path, "local")
    try:
        gateway.allow_models(LOCAL_DEFAULT)
        monkeypatch.setenv("AGENT_GATEWAY_URL", gateway.url)
        monkeypatch.setenv("AGENT_GATEWAY_KEY", gateway.new_session("n", "task", [LOCAL_DEFAULT]))
        monkeypatch.setenv("AGENT_STRUCTURED_MODELS", LOCAL_DEFAULT)
        from task_agent.task_agent import TaskAgent

        inputs = {"domain": "imo_grading", "problem": "Prove that 1 + 1 = 2.",
                  "solution": "By the definition of 2 as the successor of 1.",
                  "grading_guidelines": "Full marks for using the definition.",
                  "student_answer": "Since 2 is defined as 1 + 1, the claim holds."}
        prediction, history = TaskAgent(LOCAL_DEFAULT, str(tmp_path / "t.md")).forward(inputs)
        assert prediction in LABELS, history[-1]["content"]
        [row] = gateway.ledger.calls()
        assert row["model"] == LOCAL_DEFAULT and row["error"] is None and row["cost_usd"] == 0.0
        assert row["completion_tokens"] > 0
    finally:
        gateway.stop()
        gateway.ledger.close()
    # The server's log is the run's: its first completion (ready) and the agent's.
    assert (tmp_path / "local_model.log").read_text().count("prompt eval time") == 2


@pytest.mark.e2e
def test_a_quick_run_with_no_key_uses_the_local_model_end_to_end(tmp_path):
    config = tmp_path / "quick.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  max_generation: 1\n  eval_samples: 3\n  skip_staged_eval: true\n"
                                    "  meta_max_calls: 2\n")
    r = run_cli("run_optimization", "--domain", "imo_grading", "--preset", "quick", "--config", str(config),
                "--output_dir", str(tmp_path / "out"), "--run_id", "quick", env=no_keys_env(), cwd=tmp_path,
                timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "task local/smollm2-135m, meta local/smollm2-135m" in r.stdout and "near chance" in r.stdout
    run_dir = tmp_path / "out" / "quick"
    initial = json.loads((run_dir / "nodes" / "initial" / "node.json").read_text())
    assert initial["status"] == "ok" and set(initial["scores"]["imo_grading"]) == {"train", "val"}
    predictions = (run_dir / "evals" / initial["eval_keys"]["imo_grading"]["val"] / "predictions.csv").read_text()
    assert sum(predictions.count(f",{label},") for label in LABELS) == 3  # every answer is a label
    assert json.loads((run_dir / "nodes" / "1" / "node.json").read_text())["status"] in ("ok", "no_change",
                                                                                       "load_failed")
    assert (run_dir / "report.html").is_file() and (run_dir / "archive_tree.png").is_file()
    roles = {role for (role,) in sqlite3.connect(run_dir / "ledger.sqlite").execute("SELECT role FROM calls")}
    assert {"task", "meta"} <= roles


# -- first-run messages ---------------------------------------------------------------------------
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_an_unreachable_provider_stops_the_run_at_once_and_leaves_nothing(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("sandbox:\n  backend: auto\n  docker_host: unix:///nonexistent/docker.sock\n")
    env = no_keys_env(OPENAI_API_KEY="sk-test-0123456789",
                      OPENAI_API_BASE=f"http://127.0.0.1:{closed_port()}/v1")
    r = run_cli("run_optimization", "--domain", "imo_grading", "--task_model", "openai/some-model", "--meta_model",
                "openai/some-model", "--config", str(config), "--output_dir", str(tmp_path / "out"), env=env,
                cwd=tmp_path, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot reach the provider of openai/some-model" in r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    # The plan said what the sandbox is and why docker was not taken.
    assert "sandbox  bwrap (auto chose bwrap because docker is not usable" in r.stdout


@pytest.mark.e2e
def test_a_model_litellm_does_not_know_is_named(tmp_path, fake_openai):
    r = run_cli("run_optimization", "--domain", "imo_grading", "--task_model", "notaprovider-model-xyz",
                "--output_dir", str(tmp_path / "out"), env=cli_env(fake_openai), cwd=tmp_path)
    assert r.returncode == 2 and "notaprovider-model-xyz" in r.stderr and "unknown to litellm" in r.stderr


@pytest.mark.e2e
def test_a_budget_below_one_generation_is_said_before_starting(tmp_path, fake_openai):
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("gateway:\n", "gateway:\n  prices: {openai/fake: [1000.0, 1000.0]}\n")
                      + "loop:\n  max_generation: 0\n  eval_samples: 2\n  skip_staged_eval: true\n")
    fake_openai.set_replies(['<json>{"response": "correct"}</json>'])
    r = run_cli("run_optimization", "--domain", "imo_grading", "--task_model", "openai/fake", "--meta_model",
                "openai/fake", "--budget_usd", "0.01", "--config", str(config), "--output_dir",
                str(tmp_path / "out"), env=cli_env(fake_openai), cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    estimate = next(line for line in r.stdout.splitlines() if line.startswith("estimate "))
    assert "initial evaluation ~$" in estimate
    warning = next(line for line in r.stdout.splitlines() if line.startswith("warning: the budget of $0.01"))
    assert "below the estimate for the initial evaluation and one generation" in warning
    assert "stopped: budget exhausted" in r.stdout


@pytest.mark.e2e
def test_the_model_server_ends_when_the_run_is_killed():
    script = (f"import sys, time; sys.path.insert(0, {str(REPO_ROOT)!r})\n"
              "from services.local_model import LocalServer\n"
              f"print(LocalServer({LOCAL_DEFAULT!r}).ensure_started().proc.pid, flush=True)\n"
              "time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(run.stdout.readline())
    os.kill(server_pid, 0)  # it is serving
    run.send_signal(signal.SIGKILL)
    run.wait()
    if not process_gone(server_pid, 15):
        os.kill(server_pid, signal.SIGKILL)
        pytest.fail("the model server outlived the killed run")


# -- a server that dies ---------------------------------------------------------------------------
def test_a_server_killed_by_a_signal_is_named_in_one_line_and_not_started_again(tmp_path):
    server = LocalServer(LOCAL_DEFAULT, log_path=tmp_path / "local_model.log").ensure_started()
    try:
        assert server.dead_reason() is None
        os.kill(server.proc.pid, signal.SIGSEGV)
        deadline = time.monotonic() + 10
        while server.dead_reason() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        line = f"the local model server ({LOCAL_DEFAULT}) exited with SIGSEGV"
        assert server.dead_reason() == line
        with pytest.raises(ModelServerExited) as raised:
            server.ensure_started()  # a crashed server would crash again: no second process
        assert str(raised.value) == line
    finally:
        server.stop()
    assert server.dead_reason() == line  # what happened stays said


def test_the_server_will_not_start_without_a_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != local_model.LOCAL_KEY_ENV}
    r = subprocess.run([sys.executable, str(local_model.SERVE), "--model", str(tmp_path / "none.gguf"), "--alias",
                        "x", "--port", "1", "--n_ctx", "64", "--threads", "1"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and f"set {local_model.LOCAL_KEY_ENV}" in r.stderr


def test_a_server_that_stop_ends_is_not_dead():
    server = LocalServer(LOCAL_DEFAULT).ensure_started()
    server.stop()
    assert server.dead_reason() is None and server.proc is None


def _children_serving() -> list[int]:
    """Pids of this process's children that run services/local_serve.py."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and any(part.endswith(b"local_serve.py") for part in cmdline):
            pids.append(int(entry))
    return pids


def test_after_the_server_dies_the_gateway_answers_its_death_and_trips_the_breaker_at_once(tmp_path, monkeypatch):
    from services.config import Config
    from services.errors import ProviderDown
    from services.gateway import open_gateway

    gateway = open_gateway(Config(), tmp_path, "local")
    try:
        gateway.allow_models(LOCAL_DEFAULT)
        key = gateway.new_session("n", "task", [LOCAL_DEFAULT])
        body = {"model": LOCAL_DEFAULT, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        assert gateway.handle_chat(key, body).status == 200
        [pid] = _children_serving()
        os.kill(pid, signal.SIGSEGV)
        server = gateway.routes.server(LOCAL_DEFAULT)
        assert server is not None
        deadline = time.monotonic() + 30
        while server.dead_reason() is None and time.monotonic() < deadline:  # seen by the server's watcher
            time.sleep(0.05)
        reply = gateway.handle_chat(key, {**body, "temperature": 1})
        assert reply.status == 502 and reply.body["error"]["type"] == "provider_error"
        message = reply.body["error"]["message"]
        line = f"the local model server ({LOCAL_DEFAULT}) exited with SIGSEGV"
        assert line in message and "\n" not in message
        assert _children_serving() == []  # not started again
        # One failure, not gateway.breaker_failures: a dead server answers nothing more.
        with pytest.raises(ProviderDown) as stopped:
            gateway.check_breaker()
        assert stopped.value.reason == line
        assert gateway.handle_chat(key, body).body["error"]["type"] == "provider_down"
    finally:
        gateway.stop()
        gateway.ledger.close()


# -- the check before a run ---------------------------------------------------------------------
def test_the_check_before_a_run_makes_a_real_completion_with_the_local_model(tmp_path, monkeypatch, capsys):
    from services.config import Config
    from services.startup import open_services

    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env
    services = open_services(Config(), tmp_path / "run", ["task"], preflight=True)
    assert services.models == {LOCAL_DEFAULT}
    with services:
        [row] = services.gateway.ledger.calls()
        assert (row["node"], row["role"], row["model"]) == ("preflight", "preflight", LOCAL_DEFAULT)
        assert row["error"] is None and row["completion_tokens"] > 0
        assert len(_children_serving()) == 1  # the run's own server, already started
    assert _children_serving() == []
    starting, ready = capsys.readouterr().out.splitlines()[-2:]  # what the console shows while it starts
    assert starting == f"local    {LOCAL_DEFAULT}: starting its server (llama.cpp) and asking it one question"
    assert ready.startswith(f"local    {LOCAL_DEFAULT}: ready in ") and ready.endswith(" s")


@pytest.mark.e2e
def test_a_local_model_that_crashes_on_its_first_completion_stops_the_run_before_it_starts(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  max_generation: 1\n  eval_samples: 2\n")
    env = no_keys_env(PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "tests" / "stand_in_engine"),
                                                  os.environ.get("PYTHONPATH", "")]))
    r = run_cli("run_optimization", "--domain", "imo_grading", "--config", str(config), "--output_dir",
                str(tmp_path / "out"), "--run_id", "crash", env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-3000:]
    assert f"the local model server ({LOCAL_DEFAULT}) exited with SIGSEGV on its first completion" in r.stderr
    assert "Traceback" not in r.stderr and "gen_start" not in r.stdout
    assert not (tmp_path / "out" / "crash").exists()  # nothing was made


# -- what the engine needs ----------------------------------------------------------------------
def test_a_cpu_older_than_the_engine_is_named_before_anything_starts(tmp_path, monkeypatch):
    assert local_model.missing_cpu_features() == []  # this machine runs the engine (the tests above)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx popcnt\n")
    monkeypatch.setattr(local_model, "CPUINFO", cpuinfo)
    assert local_model.missing_cpu_features() == ["avx2", "fma", "f16c", "bmi2"]
    with pytest.raises(UserError) as raised:
        check_credentials(LOCAL_DEFAULT)
    assert "needs a CPU with avx, avx2, fma, f16c, bmi2 (x86-64-v3); this one lacks avx2, fma, f16c, bmi2" in str(
        raised.value)
    assert exit_line(LOCAL_DEFAULT, -signal.SIGILL).endswith("exited with SIGILL: this CPU lacks avx2, fma, f16c, bmi2")


def test_the_readme_and_ci_install_the_same_way():
    section = (REPO_ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = section.split("```")[1].strip().splitlines()
    assert "python -m services.install" in commands  # which runs INSTALL's pip commands (tests/test_install.py)
    assert not any(line.startswith("sudo ") for line in commands)  # root in a container has no sudo
    assert any(line.startswith("python3 -m venv ") for line in commands)
    assert all(f"`{pip.strip()}`" in section for pip in INSTALL.split("&&"))  # named in words
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    assert "python -m services.install" in ci
