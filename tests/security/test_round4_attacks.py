"""Round 4 (issue 35, items 5 to 8 and the local model's key): a held-out grader that is the grader under
another name, terminal escapes in what the plan, the dashboard and the Python API's errors quote, a link
planted where the installer kept a failed step's log, config values that ended in tracebacks, and a local
user chatting with the local model's server.

Each goes through the real command lines (`python -m run_optimization`, `python -m apps.dashboard`),
the Python API (`hyperagents`) or the real llama.cpp server, and asserts what a user sees: one visible
line and exit 2, no raw control on the terminal, nothing written through a link, a 401.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.cli import REPO_ROOT
from support.synthetic_run import make_run

# A window title, an OSC 52 clipboard write, a clear screen, a C1 CSI, a bidi override, and a newline
# that would start a line of its own on the terminal.
FORGED = "error: forged line"
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m\u202e\n" + FORGED
# The same as YAML's double-quoted escapes, which --set reads into those characters.
YAML_HOSTILE = r"\e]0;owned\a\e]52;c;cHduZWQ=\a\e[2J\x9b31m\u202e\n" + FORGED


def plain_env(**extra: str) -> dict:
    """The environment without provider keys or addresses; no model is called by these attacks."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m ...` with its output as bytes, as a terminal gets them."""
    return subprocess.run([sys.executable, "-m", *args], env=env or plain_env(), cwd=REPO_ROOT,
                          capture_output=True, timeout=timeout)


def assert_visible(*streams: bytes | str) -> str:
    """Every line printable (no control, C1, bidi or separator character) and none forged; the text."""
    text = "".join(s if isinstance(s, str) else s.decode("utf-8") for s in streams)
    for line in text.split("\n"):
        assert line.isprintable(), repr(line)
        assert not line.startswith(FORGED), text
    return text


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The command ended with exit 2 and one visible `error:` line; that line."""
    assert_visible(result.stdout, result.stderr)
    err = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in err, err[-2000:]
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def dry_run(tmp_path: Path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--dry_run",
               *flags, env=env)


# -- 5. the held-out grader is another model ----------------------------------------------------------
@pytest.fixture
def proof_env(tmp_path: Path) -> dict:
    """An OpenAI key that reaches nothing, and a `proofgrader` package for imo_proof to find (only
    found: the refusal comes before anything is graded)."""
    package = tmp_path / "pg" / "proofgrader"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return plain_env(OPENAI_API_KEY="sk-not-a-key-0123456789", OPENAI_API_BASE="http://127.0.0.1:9",
                     PYTHONPATH=str(tmp_path / "pg"))


def proof_run(tmp_path: Path, env: dict, *settings: str) -> subprocess.CompletedProcess:
    sets = [arg for item in settings for arg in ("--set", item)]
    return cli("run_optimization", "--domain", "imo_proof", "--output_dir", str(tmp_path / "out"), "--task_model",
               "openai/fake", "--meta_model", "openai/fake-meta", "--set", "sandbox.backend=bwrap", *sets, env=env)


@pytest.mark.e2e
@pytest.mark.attack("held-out grader: models.heldout_grader given as the alias grader, or as the alias task "
                    "naming the grader's model (the gap would be 0 by construction)")
@pytest.mark.parametrize("settings", [
    ("models.grader=openai/fake-grader", "models.heldout_grader=grader"),
    ("models.grader=openai/fake", "models.heldout_grader=task"),  # --task_model openai/fake
], ids=["grader", "task"])
def test_the_grader_under_a_role_alias_is_refused_as_heldout_grader(tmp_path, proof_env, settings):
    line = one_error_line(proof_run(tmp_path, proof_env, *settings))
    assert "is models.grader's own model (openai/fake" in line and "another model" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
@pytest.mark.attack("held-out grader: models.grader auto (chosen from the keys set) and the held-out grader naming "
                    "the model auto chose, with and without its provider (o4-mini, openai/o4-mini)")
@pytest.mark.parametrize("heldout", ["o4-mini", "openai/o4-mini"])
def test_an_auto_grader_and_its_model_by_another_name_are_refused(tmp_path, proof_env, heldout):
    line = one_error_line(proof_run(tmp_path, proof_env, "models.grader=auto", f"models.heldout_grader={heldout}"))
    assert f"models.heldout_grader ({heldout}) is models.grader's own model (openai/o4-mini" in line
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_the_same_model_as_heldout_grader(tmp_path, proof_env, monkeypatch):
    import hyperagents

    for name, value in proof_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(proof_env["PYTHONPATH"])
    with pytest.raises(hyperagents.UserError, match="is models.grader's own model"):
        hyperagents.run("imo_proof", output_dir=tmp_path / "out", task_model="openai/fake",
                        meta_model="openai/fake-meta",
                        settings={"models.grader": "openai/g", "sandbox.backend": "bwrap",
                                  "models.heldout_grader": "grader"})


# -- 6. one rendering path for terminal lines and error messages ----------------------------------------
@pytest.mark.e2e
@pytest.mark.attack("resume plan: a run.json whose initial_from and model name hold a window title, OSC 52, a "
                    "clear screen, C1 and bidi controls and a newline forging a line (--resume_from --dry_run)")
def test_run_json_values_reach_the_resume_plan_visibly(tmp_path):
    make_run(tmp_path / "run", nodes=3, seed=1)
    path = tmp_path / "run" / "run.json"
    record = json.loads(path.read_text())
    record["initial_from"] = {"run": "/runs/a" + HOSTILE, "node": "3" + HOSTILE, "keep": "all"}
    path.write_text(json.dumps(record))
    shown = cli("run_optimization", "--resume_from", str(tmp_path / "run"), "--dry_run")
    text = assert_visible(shown.stdout, shown.stderr)
    if shown.returncode == 0:  # shown as the plan's source of the initial agent
        assert "\\x1b]52;c;" in text and "<U+202E>" in text and "\\nerror: forged" in text
    else:  # or refused as a record no run writes
        one_error_line(shown)

    record["config"]["models"]["task"] = "openai/x" + HOSTILE
    path.write_text(json.dumps(record))
    line = one_error_line(cli("run_optimization", "--resume_from", str(tmp_path / "run"), "--dry_run"))
    assert "models.task must be printable text" in line and "\\x1b]0;owned" in line


@pytest.mark.e2e
@pytest.mark.attack("resume plan: a domain spec file whose name holds terminal escapes, bidi controls and a "
                    "newline forging a line (--domain_spec, shown in the plan)")
def test_a_spec_files_name_reaches_the_plan_visibly(tmp_path):
    folder = tmp_path / "task"
    shutil.copytree(REPO_ROOT / "examples" / "capitals", folder)
    spec = folder / ("capitals" + HOSTILE.replace("\n", "") + ".yaml")
    (folder / "capitals.yaml").rename(spec)
    shown = cli("run_optimization", "--domain_spec", str(spec), "--output_dir", str(tmp_path / "out"), "--dry_run")
    text = assert_visible(shown.stdout, shown.stderr)
    assert shown.returncode == 0 and "capitals\\x1b]0;owned\\x07" in text, text


@pytest.mark.e2e
@pytest.mark.attack("--set: values and keys holding terminal escapes, bidi controls and a newline forging a line "
                    "(models, paths, names, an unknown key)")
@pytest.mark.parametrize("item", [f"models.task=openai/x{HOSTILE}", f'models.task="openai/x{YAML_HOSTILE}"',
                                  f'loop.initial_agent="agents/{YAML_HOSTILE}"',
                                  f'tracking.experiment="{YAML_HOSTILE}"', f"loop.x{HOSTILE}=1",
                                  f'sandbox.docker_image="img{YAML_HOSTILE}"'],
                         ids=["raw", "model", "path", "name", "key", "image"])
def test_set_values_with_escapes_are_one_visible_line(tmp_path, item):
    line = one_error_line(dry_run(tmp_path, "--set", item))
    assert line.startswith("error: --set ") and ("\\x1b" in line or "#x001b" in line), line
    assert not (tmp_path / "out").exists()


def _dashboard(root: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "apps.dashboard", str(root), "--port", "0"], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=plain_env())
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().decode() if ready else ""
    assert line.startswith("dashboard: http://127.0.0.1:"), line
    return proc, int(line.split()[1].rstrip("/").rsplit(":", 1)[1])


@pytest.mark.e2e
@pytest.mark.attack("dashboard: a request path holding a window title, OSC 52, a clear screen, C1 and bidi "
                    "controls that makes the page fail (the server's error line on the console)")
def test_a_hostile_request_path_reaches_the_dashboards_console_visibly(tmp_path):
    make_run(tmp_path / "runs" / "plain", nodes=3, seed=1)
    proc, port = _dashboard(tmp_path / "runs")
    try:
        # An absolute target whose host is an IPv6 address that never closes makes the path's parse fail:
        # the server's error line.
        # No space or newline (they end the request line's path), and a host part with no `]`.
        bidi = "\u202e".encode().decode("latin-1")  # its UTF-8 bytes, as the request line is read
        target = "http://[\x1b[2J\x9b31m" + bidi + "/\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode("latin-1"))
            reply = conn.recv(200)
        assert reply.startswith(b"HTTP/1.0 500") or reply.startswith(b"HTTP/1.1 500"), reply
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    text = assert_visible(err)
    assert "dashboard: http://[\\x1b[2J\\u009b31m" in text and "\\x1b]52;c;" in text, text


@pytest.mark.attack("Python API: a UserError from hyperagents.run, evaluate and load_run quoting agent or folder "
                    "text (escapes, bidi controls, a newline): str(e) and an uncaught traceback")
def test_the_apis_errors_carry_no_raw_control(tmp_path):
    import hyperagents

    folder = tmp_path / ("run" + HOSTILE)
    calls = [lambda: hyperagents.load_run(folder),
             lambda: hyperagents.run(HOSTILE, output_dir=tmp_path / "out"),
             lambda: hyperagents.evaluate(str(tmp_path / "agent.py"), domain=HOSTILE),
             lambda: hyperagents.run("imo_grading", output_dir=tmp_path / "out", settings={"loop.seed": 10**5000}),
             lambda: hyperagents.run("imo_grading", output_dir=tmp_path / "out",
                                     settings={"models.task": "openai/x" + HOSTILE})]
    for call in calls:
        with pytest.raises(hyperagents.UserError) as caught:
            call()
        text = str(caught.value)
        assert text.isprintable() and ("\\x1b]0;owned" in text or "an integer of about 5001 digits" in text), text
    uncaught = subprocess.run([sys.executable, "-c", "import sys, hyperagents; hyperagents.load_run(sys.argv[1])",
                               str(folder)], cwd=REPO_ROOT, capture_output=True, env=plain_env(), timeout=120)
    assert uncaught.returncode == 1 and b"UserError" in uncaught.stderr
    assert_visible(uncaught.stderr)


# -- 7. private temp files --------------------------------------------------------------------------
@pytest.mark.attack("installer: a link planted by another local user at the name a failed step's log was kept "
                    "under in the shared temp folder (python -m services.install)")
def test_the_installer_writes_nothing_through_a_planted_link(tmp_path, monkeypatch, capsys):
    from services import install

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    for number in (1, 2):
        (shared / f"hyperagents-install-step-{number}.log").symlink_to(victim)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    assert install.install("pip install --no-such-option-here") == 2
    err = capsys.readouterr().err
    assert victim.read_text() == "the user's own file\n"
    kept = Path(err.split("all of them in ", 1)[1].split("):", 1)[0])
    assert kept.is_file() and not kept.is_symlink() and "no such option" in kept.read_text()
    folder = kept.parent.stat()
    assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == os.getuid() and kept.parent.parent == shared


# -- 8. config values that ended in tracebacks ------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.attack("--set loop.seed with 4,000 and 5,000 digits, and a 90-digit budget (Python's int digit "
                    "limit, a float overflow)")
@pytest.mark.parametrize("item", ["loop.seed=" + "9" * 4000, "loop.seed=" + "9" * 5000, "loop.seed=" + "9" * 90,
                                  "gateway.budget_usd=" + "9" * 90, "loop.stages=[[10, " + "9" * 90 + "]]"],
                         ids=["4000", "5000", "90", "budget", "stages"])
def test_huge_numbers_are_one_line(tmp_path, item):
    line = one_error_line(dry_run(tmp_path, "--set", item))
    assert len(line) < 300 and ("more than 100 digits" in line or "an integer of about" in line), line


@pytest.mark.e2e
@pytest.mark.attack("--set sandbox.docker_image with a space, a newline, an upper-case name or 300 characters "
                    "(Docker's reference grammar)")
@pytest.mark.parametrize("value", ["a b", '"a\\nb"', "Ubuntu:22.04", "x" * 300, "img:tag:tag", "img@sha256:abc"])
def test_a_docker_image_that_is_no_reference_is_one_line(tmp_path, value):
    line = one_error_line(dry_run(tmp_path, "--set", f"sandbox.docker_image={value}"))
    assert line.startswith("error: --set sandbox.docker_image: sandbox.docker_image must be")


@pytest.mark.e2e
@pytest.mark.attack("tracking and engine URIs of another scheme (javascript:, ftp://, a bare path) and a Ray "
                    "address with a space (--set tracking.mlflow_uri, sandbox.docker_host, sandbox.ray_address)")
@pytest.mark.parametrize("item", ["tracking.mlflow_uri=javascript:alert(1)", "tracking.mlflow_uri=ftp://host/x",
                                  "tracking.mlflow_uri=/just/a/path", "sandbox.docker_host=gopher://engine",
                                  "sandbox.ray_address=head node:6379"])
def test_a_uri_of_another_scheme_is_one_line(tmp_path, item):
    key = item.split("=", 1)[0]
    line = one_error_line(dry_run(tmp_path, "--set", item))
    assert line.startswith(f"error: --set {key}: {key} must be")


# -- the local model's key ------------------------------------------------------------------------------
@pytest.mark.attack("local model: another local user chats with the local model's server on 127.0.0.1 without "
                    "its key, with a wrong key, and reads the key from its command line")
def test_the_local_model_server_answers_only_its_key(tmp_path):
    from services.errors import UserError
    from services.local_model import LocalServer, weights_path
    from services.providers import LOCAL_DEFAULT

    try:
        weights_path(LOCAL_DEFAULT)
    except UserError as e:
        pytest.skip(str(e))
    server = LocalServer(LOCAL_DEFAULT, n_ctx=512, threads=1, log_path=tmp_path / "local_model.log")
    server.ensure_started()
    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        body = json.dumps({"model": server.alias, "messages": [{"role": "user", "content": "Say hi."}],
                           "max_tokens": 2}).encode()

        def status(path: str, key: str | None, data: bytes | None = None) -> int:
            headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
            try:
                with direct.open(urllib.request.Request(server.api_base + path, data=data, headers=headers),
                                 timeout=120) as reply:
                    return reply.status
            except urllib.error.HTTPError as e:
                return e.code

        assert status("/chat/completions", None, body) == 401
        assert status("/chat/completions", "sk-guess", body) == 401
        assert status("/models", None) == 401
        assert status("/chat/completions", server.api_key, body) == 200
        assert server.proc is not None
        assert server.api_key.encode() not in Path(f"/proc/{server.proc.pid}/cmdline").read_bytes()
    finally:
        server.stop()


@pytest.mark.attack("local model: a handed run folder whose local_model.log is a link to a file of the user, which "
                    "the local model's server would append its output to on resume")
def test_the_local_models_log_is_never_written_through_a_link(tmp_path):
    from services.fsutil import NotWritable
    from services.local_model import LocalServer
    from services.providers import LOCAL_DEFAULT

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's\n")
    os.symlink(victim, tmp_path / "local_model.log")
    server = LocalServer(LOCAL_DEFAULT, log_path=tmp_path / "local_model.log")
    with pytest.raises(NotWritable, match="is a link: nothing is written through it"):
        server.ensure_started()
    assert victim.read_text() == "the user's\n" and server.proc is None
