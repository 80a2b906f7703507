"""The harness for real: CLI subprocess -> worker subprocess -> litellm -> gateway -> fake provider."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from support.backends import BACKENDS
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli, run_cli_without

LABEL_REPLY = 'Checked every step.\n<json>{"response": "Partial"}</json>'


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text(FAST_CONFIG)
    return str(path)


def harness(tmp_path, fake, *args, run_id="r", config=None, env_extra=None):
    extra = ["--config", config] if config else []
    return run_cli("domains.harness", "--output_dir", str(tmp_path / "out"), "--run_id", run_id,
                   "--model", "openai/fake", *extra, *args, env=cli_env(fake, **(env_extra or {})))


def agent_file(tmp_path, body: str) -> str:
    path = tmp_path / "my_agent.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.e2e
def test_grading_run_writes_predictions_transcripts_and_report(tmp_path, fake_openai, config_file):
    fake_openai.set_replies([LABEL_REPLY])
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--subset", "_filtered_100_train",
                "--num_samples", "10", config=config_file)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "out" / "r"
    df = pd.read_csv(folder / "predictions.csv", dtype=str)
    assert len(df) == 10 and set(df["prediction"]) == {"partial"}
    assert len(list((folder / "agent_evals").glob("chat_history_*.md"))) == 10
    assert fake_openai.count == 10
    # Labels never reach the model: no request carries a row's Points/Reward pairing marker.
    data = pd.read_csv(REPO_ROOT / "domains/imo/data/gradingbench_filtered_100_train.csv", dtype=str).head(10)
    prompts = [m["content"] for req in fake_openai.requests for m in req["json"]["messages"]]
    assert all("Reward" not in p and "Points" not in p for p in prompts)
    assert sum(row["Response"][:200] in p for row in data.to_dict("records") for p in prompts) == 10

    rep = run_cli("domains.report", "--domain", "imo_grading", "--dname", str(folder), env=cli_env(fake_openai))
    assert rep.returncode == 0, rep.stderr
    report = json.loads((folder / "report.json").read_text())
    expected_acc = (data["Reward"].str.lower() == "partial").mean()
    assert report["overall_accuracy"] == pytest.approx(expected_acc)
    assert f"{expected_acc:.1%}".rstrip("0") .split(".")[0] in rep.stdout


@pytest.mark.e2e
def test_agent_sees_only_input_columns(tmp_path, fake_openai, config_file):
    path = agent_file(tmp_path, """
        import json
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                self.file = chat_history_file
            def forward(self, inputs):
                open(self.file, "w").write(json.dumps(inputs))
                return "correct", []
    """)
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "3", "--agent_path", path,
                config=config_file)
    assert r.returncode == 0, r.stderr
    seen = [json.loads(p.read_text()) for p in (tmp_path / "out/r/agent_evals").glob("*.md")]
    assert len(seen) == 3
    for inputs in seen:
        assert set(inputs) == {"domain", "problem", "solution", "grading_guidelines", "student_answer"}


@pytest.mark.e2e
def test_rows_reach_the_agent_under_tokens_and_their_transcripts_are_found_by_id(tmp_path, fake_openai, config_file):
    path = agent_file(tmp_path, """
        from pathlib import Path
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                self.file = chat_history_file
            def forward(self, inputs):
                Path(self.file).write_text(inputs["student_answer"][:80])
                return Path(self.file).stem, []
    """)
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "4", "--agent_path", path,
                config=config_file)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "out" / "r"
    data = pd.read_csv(REPO_ROOT / "domains/imo/data/gradingbench_filtered_100_train.csv", dtype=str).head(4)
    df = pd.read_csv(folder / "predictions.csv", dtype=str)
    assert list(df["Grading ID"]) == list(data["Grading ID"])  # the host keeps the data's ids
    assert not any(i in p for i in data["Grading ID"] for p in df["prediction"])  # the agent saw none of them
    journal = {rec["id"]: rec for rec in map(json.loads, (folder / "predictions.jsonl").read_text().splitlines())}
    for qid, answer in zip(data["Grading ID"], data["Response"]):
        token = journal[qid]["token"]
        assert journal[qid]["prediction"] == f"chat_history_{token}"
        assert (folder / "agent_evals" / f"chat_history_{token}.md").read_text() == answer[:80]


def train_responses(n):
    train = pd.read_csv(REPO_ROOT / "domains/imo/data/gradingbench_filtered_100_train.csv", dtype=str)
    return list(train["Response"][:n])


@pytest.mark.e2e
def test_row_errors_are_recorded_and_retried_on_resume(tmp_path, fake_openai, config_file):
    # The sandboxed agent sees no host file, so the provider's reply says when to fail.
    fake_openai.set_replies(["fail now"])
    failing = set(train_responses(10)[3:6])
    path = agent_file(tmp_path, f"""
        from agent.llm import get_response
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                self.model = model
            def forward(self, inputs):
                print("agent chatter on stdout must not break the protocol")
                said = get_response([{{"role": "user", "content": "go?"}}], self.model).text
                if said == "fail now" and inputs["student_answer"] in {failing!r}:
                    raise RuntimeError("agent bug")
                return "almost", []
    """)
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "10", "--agent_path", path,
                config=config_file)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "out" / "r"
    df = pd.read_csv(folder / "predictions.csv", dtype=str, keep_default_na=False)
    failed = df[df["error"] != ""]
    assert list(failed.index) == [3, 4, 5] and all("RuntimeError: agent bug" in e for e in failed["error"])
    assert (df[df["error"] == ""]["prediction"] == "almost").all()

    fake_openai.set_replies(["go on"])
    r = run_cli("domains.harness", "--domain", "imo_grading", "--num_samples", "10", "--agent_path", path,
                "--resume_from", str(folder), "--model", "openai/fake", "--config", config_file,
                env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(folder / "predictions.csv", dtype=str, keep_default_na=False)
    assert (df["prediction"] == "almost").all() and (df["error"] == "").all()


@pytest.mark.e2e
def test_an_agent_that_imports_litellm_in_a_row_is_routed_to_the_gateway_and_counted(tmp_path, fake_openai):
    # The worker does not import litellm; the agent's first import of it, in the middle of a row, is
    # wrapped at once: its provider model name reaches the gateway (which allows only "openai/fake",
    # not the "fake" that litellm alone would send), and the call counts for its row.
    cfg = tmp_path / "priced.yaml"
    cfg.write_text(FAST_CONFIG + "gateway:\n  prices: {openai/fake: [1.0, 2.0]}\n")
    path = agent_file(tmp_path, """
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                self.model = model
            def forward(self, inputs):
                import litellm
                reply = litellm.completion(model=self.model, messages=[{"role": "user", "content": "grade"}])
                return reply.choices[0].message.content, []
    """)
    fake_openai.set_replies([LABEL_REPLY])
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "3", "--agent_path", path,
                config=str(cfg))
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "out" / "r"
    df = pd.read_csv(folder / "predictions.csv", keep_default_na=False)
    assert (df["error"] == "").all() and (df["prediction"] == LABEL_REPLY).all()
    assert fake_openai.count == 3 and {req["json"]["model"] for req in fake_openai.requests} == {"fake"}
    usage = [json.loads(line).get("usage") for line in (folder / "predictions.jsonl").read_text().splitlines()]
    assert [u["calls"] for u in usage] == [1, 1, 1] and (df["prompt_tokens"] > 0).all()
    assert df["cost_usd"].sum() == pytest.approx(json.loads((folder / "run.json").read_text())["cost_usd"])
    assert (df["cost_usd"] > 0).all()


@pytest.mark.e2e
def test_worker_crash_fails_only_that_row(tmp_path, fake_openai, config_file):
    path = agent_file(tmp_path, """
        import os
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                pass
            def forward(self, inputs):
                if inputs["student_answer"] == CRASH:
                    os._exit(9)
                return "correct", []
    """.replace("CRASH", repr(train_responses(3)[2])))
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "6", "--num_workers", "1",
                "--agent_path", path, config=config_file)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out/r/predictions.csv", dtype=str, keep_default_na=False)
    assert list(df["error"] != "") == [False, False, True, False, False, False]
    assert "worker died" in df["error"][2]


@pytest.mark.e2e
def test_a_stuck_row_times_out_and_the_others_finish(tmp_path, fake_openai):
    cfg = tmp_path / "timeout.yaml"
    cfg.write_text("harness:\n  row_timeout_s: 2\n  num_workers: 2\n")
    path = agent_file(tmp_path, """
        import time
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                pass
            def forward(self, inputs):
                if inputs["student_answer"] == STUCK:
                    time.sleep(600)
                return "partial", []
    """.replace("STUCK", repr(train_responses(2)[1])))
    started = time.time()
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "5", "--agent_path", path,
                config=str(cfg))
    assert r.returncode == 0, r.stderr
    assert time.time() - started < 60
    df = pd.read_csv(tmp_path / "out/r/predictions.csv", dtype=str, keep_default_na=False)
    assert list(df["error"]) == ["", "timeout after 2 s", "", "", ""]
    assert list(df["prediction"]) == ["partial", "", "partial", "partial", "partial"]


@pytest.mark.e2e
def test_resume_after_kill_pays_nothing_twice(tmp_path, fake_openai, config_file):
    fake_openai.set_replies([LABEL_REPLY])
    fake_openai.latency = 0.4
    args = ["--domain", "imo_grading", "--num_samples", "16", "--num_workers", "2", "--model", "openai/fake",
            "--config", config_file]
    folder = tmp_path / "out" / "k"
    proc = subprocess.Popen([sys.executable, "-m", "domains.harness", "--output_dir", str(tmp_path / "out"),
                             "--run_id", "k", *args], cwd=REPO_ROOT, env=cli_env(fake_openai),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = folder / "predictions.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {json.loads(line)["id"] for line in journal.read_text().splitlines()}
    assert 5 <= len(done_before) < 16
    time.sleep(1.0)  # let the orphaned worker finish what it had in flight
    calls_before = fake_openai.count

    r = run_cli("domains.harness", "--resume_from", str(folder), *args, env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(folder / "predictions.csv", dtype=str)
    assert len(df) == 16 and (df["prediction"] == "partial").all()
    # Only the rows not finished before the kill were asked again.
    assert fake_openai.count - calls_before == 16 - len(done_before)
    assert calls_before <= len(done_before) + 2  # at most the two rows in flight were lost


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_closes_the_sandbox_and_the_run_resumes(backend, tmp_path, fake_openai, config_file):
    fake_openai.set_replies([LABEL_REPLY])
    fake_openai.latency = 0.4
    args = ["--domain", "imo_grading", "--num_samples", "12", "--num_workers", "2", "--model", "openai/fake",
            "--config", config_file, "--sandbox", backend]
    folder = tmp_path / "out" / "t"
    proc = subprocess.Popen([sys.executable, "-m", "domains.harness", "--output_dir", str(tmp_path / "out"),
                             "--run_id", "t", *args], cwd=REPO_ROOT, env=cli_env(fake_openai),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    journal = folder / "predictions.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 3):
        time.sleep(0.05)
    assert sandbox_leftovers(backend, folder, proc.pid)  # the check below can see this run's sandbox
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "interrupted" in err
    assert not sandbox_leftovers(backend, folder, proc.pid)
    r = run_cli("domains.harness", "--resume_from", str(folder), *args, env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr
    assert (pd.read_csv(folder / "predictions.csv", dtype=str)["prediction"] == "partial").all()


def sandbox_leftovers(backend: str, folder, pid: int) -> list:
    """Host processes of a bwrap sandbox of this run, or the docker containers process `pid` made."""
    if backend == "docker":
        import docker

        from services.sandbox.docker_backend import LABEL

        return docker.from_env().containers.list(all=True, filters={"label": f"{LABEL}={pid}"})
    found = []
    for other in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{other}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmd:
            found.append(other)
    return found


@pytest.mark.e2e
def test_budget_stop_is_clear_and_resumable(tmp_path, fake_openai):
    fake_openai.set_replies([LABEL_REPLY])
    cfg = tmp_path / "priced.yaml"
    # $1000 per 1M prompt tokens: a row of 2,000-4,000 tokens costs $2-4, and while it runs the gateway
    # holds a token per byte of its request ($8-17): $20 pays for a few rows, never all 8.
    cfg.write_text("gateway:\n  prices: {openai/fake: [1000.0, 0.0]}\nharness:\n  num_workers: 1\n")
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "8", "--budget_usd", "20",
                config=str(cfg))
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]  # the lines before it are the progress bar
    assert last.startswith("error: budget exhausted") and "--resume_from" in last
    paid = fake_openai.count
    assert 1 <= paid < 8
    folder = tmp_path / "out" / "r"
    r = run_cli("domains.harness", "--domain", "imo_grading", "--num_samples", "8", "--resume_from", str(folder),
                "--model", "openai/fake", "--config", str(cfg), "--budget_usd", "1000", env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr
    assert fake_openai.count == 8  # nothing paid twice
    df = pd.read_csv(folder / "predictions.csv")
    assert (df["prediction"] == "partial").all()
    # Per-row cost comes back from the gateway and adds up to the ledger's total.
    ledger_total = json.loads((folder / "run.json").read_text())["cost_usd"]
    assert json.loads((folder / "run.json").read_text())["schema_version"] == 1
    assert df["cost_usd"].sum() == pytest.approx(ledger_total) and (df["cost_usd"] > 0).all()


@pytest.mark.e2e
def test_proof_run_then_grading_of_its_proofs(tmp_path, fake_openai, config_file):
    fake_openai.set_replies(['<json>{"response": "By induction on n, the claim holds."}</json>'])
    r = harness(tmp_path, fake_openai, "--domain", "imo_proof", "--num_samples", "3", config=config_file)
    assert r.returncode == 0, r.stderr
    proofs = tmp_path / "out" / "r"
    df = pd.read_csv(proofs / "predictions.csv", dtype=str)
    assert (df["prediction"] == "By induction on n, the claim holds.").all()
    # The prover sees the problem only, never the reference solution.
    bench = pd.read_csv(REPO_ROOT / "domains/imo/data/proofbench.csv", dtype=str).head(3)
    prompts = "\n".join(m["content"] for req in fake_openai.requests for m in req["json"]["messages"])
    assert all(sol[:200] not in prompts for sol in bench["Solution"])

    fake_openai.set_replies(['<json>{"response": "Almost"}</json>'])
    r = harness(tmp_path, fake_openai, "--domain", "imo_proof_grading", "--proofs_dname", str(proofs),
                run_id="g", config=config_file)
    assert r.returncode == 0, r.stderr
    graded = pd.read_csv(tmp_path / "out" / "g" / "predictions.csv", dtype=str)
    assert len(graded) == 3 and (graded["prediction"] == "almost").all()
    assert (graded["Response"] == "By induction on n, the claim holds.").all()

    # One proof changes (its task run was redone): resuming the grading grades that row again,
    # and only that row; the others keep their grades and cost nothing.
    df.loc[1, "prediction"] = "A different proof, by contradiction."
    df.to_csv(proofs / "predictions.csv", index=False)
    fake_openai.set_replies(['<json>{"response": "Incorrect"}</json>'])
    before = fake_openai.count
    r = run_cli("domains.harness", "--resume_from", str(tmp_path / "out" / "g"), "--domain", "imo_proof_grading",
                "--proofs_dname", str(proofs), "--model", "openai/fake", "--config", config_file,
                env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr
    assert fake_openai.count - before == 1
    regraded = pd.read_csv(tmp_path / "out" / "g" / "predictions.csv", dtype=str)
    assert list(regraded["prediction"]) == ["almost", "incorrect", "almost"]


@pytest.mark.e2e
def test_proof_report_without_proofgrader_says_how_to_install(tmp_path, fake_openai, config_file):
    fake_openai.set_replies(['<json>{"response": "proof"}</json>'])
    assert harness(tmp_path, fake_openai, "--domain", "imo_proof", "--num_samples", "1",
                   config=config_file).returncode == 0
    r = run_cli_without(("proofgrader",), "domains.report", "--domain", "imo_proof", "--dname",
                        str(tmp_path / "out" / "r"), env=cli_env(fake_openai))
    assert r.returncode == 2
    assert "pip install -e ./proofgrader_repo" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.e2e
@pytest.mark.parametrize("args, needles", [
    (["--domain", "imo_gradnig"], ["unknown domain 'imo_gradnig'", "imo_grading"]),
    (["--domain", "imo_grading", "--subset", "_filtered_100_dev"], ["unknown subset '_filtered_100_dev'"]),
    (["--domain", "imo_grading", "--config", "/nonexistent/cfg.yaml"], ["cannot read config"]),
    (["--domain", "imo_proof_grading"], ["--proofs_dname"]),
    (["--domain", "imo_grading", "--model", "notaprovider-model-xyz"], ["unknown to litellm"]),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, fake_openai, args, needles):
    r = harness(tmp_path, fake_openai, *args)
    one_line_error(r, *needles)
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_bad_yaml_config(tmp_path, fake_openai):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gateway: [unclosed\n")
    one_line_error(harness(tmp_path, fake_openai, "--domain", "imo_grading", config=str(bad)), "not valid YAML")
    bad.write_text("gatway:\n  max_retries: 1\n")
    one_line_error(harness(tmp_path, fake_openai, "--domain", "imo_grading", config=str(bad)),
                   "unknown config key gatway")
    bad.write_text("gateway:\n  requests_per_minute: 0\n")
    one_line_error(harness(tmp_path, fake_openai, "--domain", "imo_grading", config=str(bad)),
                   "gateway.requests_per_minute must be a positive integer")


@pytest.mark.e2e
def test_missing_api_key_names_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    r = run_cli("domains.harness", "--domain", "imo_grading", "--model", "openai/o4-mini", "--output_dir",
                str(tmp_path / "out"), env=env, cwd=tmp_path)  # cwd: no .env file of the project is read
    one_line_error(r, "missing API key for model openai/o4-mini", "OPENAI_API_KEY")
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("body, needle", [
    ("class NotTheAgent:\n    pass\n", "has no TaskAgent"),
    ("import this_module_does_not_exist\n", "ModuleNotFoundError"),
])
def test_agent_path_without_task_agent(tmp_path, fake_openai, body, needle):
    path = agent_file(tmp_path, body)
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--agent_path", path)
    one_line_error(r, "cannot load TaskAgent", needle)
    assert not (tmp_path / "out" / "r").exists()


@pytest.mark.e2e
def test_proofs_dname_with_missing_columns(tmp_path, fake_openai):
    proofs = tmp_path / "proofs"
    proofs.mkdir()
    pd.DataFrame({"Problem ID": ["p1"], "prediction": ["a proof"]}).to_csv(proofs / "predictions.csv", index=False)
    r = harness(tmp_path, fake_openai, "--domain", "imo_proof_grading", "--proofs_dname", str(proofs))
    one_line_error(r, "Problem")
    (proofs / "predictions.csv").write_text("")
    one_line_error(harness(tmp_path, fake_openai, "--domain", "imo_proof_grading", "--proofs_dname", str(proofs)),
                   "has no rows")
    assert not (tmp_path / "out").exists()


def test_checksum_mismatch_stops_before_any_call(tmp_path, fake_openai, monkeypatch, capsys):
    import dataclasses
    import shutil

    import domains.imo.data as data
    from domains import registry
    from domains.harness.__main__ import main
    from domains.registry import get_domain
    from services.errors import exit_on_user_error

    copy = tmp_path / "data"
    shutil.copytree(data.DATA_DIR, copy)
    target = copy / "gradingbench_filtered_100_train.csv"
    target.write_bytes(target.read_bytes().replace(b"Let", b"Lex", 1))

    monkeypatch.setitem(registry.DOMAINS, "imo_grading", dataclasses.replace(get_domain("imo_grading"), data_dir=copy))
    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(lambda: main(["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"),
                                         "--model", "openai/fake"]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: checksum mismatch for") and len(err.strip().splitlines()) == 1
    assert fake_openai.count == 0 and not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_an_installed_agent_package_is_mounted_read_only(tmp_path, fake_openai, config_file):
    # Like `proofgrader.task_agent` after `pip install -e`: importable here, outside any workspace.
    package = tmp_path / "site" / "mygrader"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task_agent.py").write_text(textwrap.dedent("""
        import os
        class TaskAgent:
            def __init__(self, model, chat_history_file=None):
                pass
            def forward(self, inputs):
                here = os.path.dirname(__file__)
                try:
                    open(os.path.join(here, "tampered"), "w").write("x")
                    return "wrote its own package", []
                except OSError:
                    return "almost", []
    """))
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "3",
                "--agent_path", "mygrader.task_agent", config=config_file,
                env_extra={"PYTHONPATH": str(tmp_path / "site")})
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out/r/predictions.csv", dtype=str, keep_default_na=False)
    assert list(df["prediction"]) == ["almost"] * 3 and not (package / "tampered").exists()


@pytest.mark.e2e
def test_an_agent_that_never_finishes_loading_is_stopped(tmp_path, fake_openai):
    cfg = tmp_path / "start.yaml"
    cfg.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  start_timeout_s: 3\n"))
    path = agent_file(tmp_path, """
        import time
        time.sleep(600)
        class TaskAgent:
            pass
    """)
    started = time.time()
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "2", "--agent_path", path,
                config=str(cfg))
    one_line_error(r, "did not load within 3 s")
    assert time.time() - started < 30 and not (tmp_path / "out" / "r").exists()


@pytest.mark.e2e
def test_num_samples_zero_is_refused_before_anything_runs(tmp_path, fake_openai):
    r = harness(tmp_path, fake_openai, "--domain", "imo_grading", "--num_samples", "0")
    assert r.returncode == 2 and "--num_samples: must be -1 or 1 or more, got 0" in r.stderr
    assert not (tmp_path / "out").exists() and fake_openai.count == 0
