"""A provider that fails is an infrastructure event, never the agent's answer (issue 26).

The provider is a real local server (tests/support/fake_openai.py) of the test's own, stopped by its
handle in the middle of a run: the run stops with one line and a non-zero exit, keeps nothing
from the rows the outage touched, and a resume with the provider back finishes every row
without paying twice for one. What counts as a provider failure is the gateway's to say, from
its own calls: an agent's text saying so is its answer.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from optimizer.launch import resume_command
from optimizer.request import RunRequest
from services.errors import EXIT_PROVIDER_DOWN
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from support.fake_openai import FakeOpenAI
from support.scripted_loop import IMPROVE, MARKER, responder
from support.waiting import wait_for

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

# The agent asks the model once per row, naming the row, and swallows any failure: what an
# outage makes of its answer ("swallowed") must never be kept.
AGENT = """
import hashlib, json
from agent.llm import get_response
class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.model = model
    def forward(self, inputs):
        row = "row:" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        try:
            said = get_response([{"role": "user", "content": row}], self.model).text
        except Exception:
            return "swallowed", []
        return ANSWER, []
"""


def agent_file(tmp_path, answer: str = '"said"') -> str:
    path = tmp_path / "outage_agent.py"
    path.write_text(AGENT.replace("ANSWER", answer))
    return str(path)


def config_file(tmp_path, extra: str = "") -> str:
    path = tmp_path / "outage.yaml"
    path.write_text(FAST_CONFIG.replace("gateway:\n", "gateway:\n  breaker_failures: 3\n")
                    .replace("harness:\n", "harness:\n  num_workers: 2\n") + extra)
    return str(path)


def asked_rows(server: FakeOpenAI) -> list[str]:
    """The rows a provider was asked about (the probe and other calls are no row's)."""
    rows = []
    for request in server.requests:
        content = str(((request.get("json") or {}).get("messages") or [{}])[-1].get("content"))
        if content.startswith("row:"):
            rows.append(content)
    return rows


def journal(folder: Path) -> list[dict]:
    path = folder / "predictions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def harness_args(tmp_path, agent: str, config: str, rows: int) -> list[str]:
    return ["--domain", "imo_grading", "--num_samples", str(rows), "--agent_path", agent, "--model", "openai/fake",
            "--config", config]


def test_the_harness_stops_on_an_outage_keeps_nothing_from_it_and_resumes(tmp_path):
    config, agent = config_file(tmp_path), agent_file(tmp_path)
    folder = tmp_path / "out" / "h"
    args = harness_args(tmp_path, agent, config, 16)
    with FakeOpenAI(latency=0.3) as first:
        proc = subprocess.Popen([sys.executable, "-m", "domains.harness", "--output_dir", str(tmp_path / "out"),
                                 "--run_id", "h", *args], cwd=REPO_ROOT, env=cli_env(first, TQDM_DISABLE="1"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: len(journal(folder)) >= 4 or proc.poll() is not None, 120, "4 rows done")
            first.stop()  # the provider goes away in the middle of the run
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == EXIT_PROVIDER_DOWN, err
    assert len(err.strip().splitlines()) == 1, err
    line = err.strip()
    assert line.startswith("stopped: provider for openai/fake failed 3 times in a row: ") and "Connection error" in line
    assert line.endswith(f"nothing was recorded from the failed rows; resume with --resume_from {folder}")
    kept = journal(folder)
    assert 4 <= len(kept) < 16 and all(r["prediction"] == "said" and not r["error"] for r in kept)
    assert not (folder / "run.json").exists()  # written when a run ends, never for one cut short

    with FakeOpenAI() as back:
        r = run_cli("domains.harness", "--resume_from", str(folder), *args, env=cli_env(back, TQDM_DISABLE="1"))
        assert r.returncode == 0, r.stderr
        # Only the rows the first run did not finish were asked again, each once.
        again = asked_rows(back)
        assert len(again) == len(set(again)) == 16 - len(kept)
    df = pd.read_csv(folder / "predictions.csv", dtype=str, keep_default_na=False)
    assert len(df) == 16 and (df["prediction"] == "said").all() and (df["error"] == "").all()


def test_a_row_that_met_a_provider_failure_is_run_again_not_scored(tmp_path, fake_openai):
    # One call fails (no retries here); the breaker's count never reaches 3. The rows in flight
    # then, its own among them, swallowed it and answered: they are run again instead of kept.
    fake_openai.latency = 0.2
    fake_openai.add_faults(["500"])
    config, agent = config_file(tmp_path), agent_file(tmp_path)
    Path(config).write_text(Path(config).read_text().replace("breaker_failures: 3\n",
                                                             "breaker_failures: 3\n  max_retries: 0\n"))
    r = run_cli("domains.harness", "--output_dir", str(tmp_path / "out"), "--run_id", "f",
                *harness_args(tmp_path, agent, config, 6), env=cli_env(fake_openai, TQDM_DISABLE="1"))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out" / "f" / "predictions.csv", dtype=str, keep_default_na=False)
    assert (df["prediction"] == "said").all() and (df["error"] == "").all()
    assert len(asked_rows(fake_openai)) >= 6 + 1 + 1  # the failed call, and at least its row again


def test_a_row_whose_own_calls_always_fail_is_scored_when_the_provider_answers_the_probe(tmp_path, fake_openai):
    # The agent's call for one row outlasts the gateway's timeout on every try (agent code can ask
    # for that: a long reply), while the provider answers everything else: after its tries the
    # gateway's probe is answered, so the row's answer is the agent's, and the run goes on.
    slow = []

    def respond(request: dict) -> str:
        row = request["messages"][-1]["content"]
        if row.startswith("row:") and not slow:
            slow.append(row)
        if slow and row == slow[0]:
            time.sleep(1.5)
        return "ok"

    fake_openai.set_responder(respond)
    config = config_file(tmp_path)
    Path(config).write_text(Path(config).read_text().replace(  # the breaker's own count stays below its limit
        "breaker_failures: 3\n", "breaker_failures: 10\n  request_timeout_s: 0.5\n  max_retries: 0\n"))
    r = run_cli("domains.harness", "--output_dir", str(tmp_path / "out"), "--run_id", "s",
                *harness_args(tmp_path, agent_file(tmp_path), config, 4), env=cli_env(fake_openai, TQDM_DISABLE="1"))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out" / "s" / "predictions.csv", dtype=str, keep_default_na=False)
    assert sorted(df["prediction"]) == ["said", "said", "said", "swallowed"]
    assert asked_rows(fake_openai).count(slow[0]) == 3  # MAX_INFRA_TRIES tries, then the probe
    assert sum(r["json"]["messages"][-1]["content"] == "Reply with OK." for r in fake_openai.requests) == 1


@pytest.mark.parametrize("answer", ['"provider_error"',
                                    '"Error code: 502 - provider call for openai/fake failed: provider_error"'])
def test_an_agent_that_says_provider_error_is_scored_on_it(tmp_path, fake_openai, answer):
    # Text the agent returns is its answer, whatever it says: it cannot have a row redone or stop the run.
    config, agent = config_file(tmp_path), agent_file(tmp_path, answer)
    r = run_cli("domains.harness", "--output_dir", str(tmp_path / "out"), "--run_id", "p",
                *harness_args(tmp_path, agent, config, 4), env=cli_env(fake_openai, TQDM_DISABLE="1"))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out" / "p" / "predictions.csv", dtype=str, keep_default_na=False)
    assert (df["prediction"] == json.loads(answer)).all() and (df["error"] == "").all()
    assert len(asked_rows(fake_openai)) == 4


# -- the loop ------------------------------------------------------------------------------

def loop_config(tmp_path, extra: str = "", gateway: str = "") -> str:
    """Small evaluations (3 staged train rows, then 6 train and 6 val), bwrap, quick retries."""
    path = tmp_path / "loop.yaml"
    path.write_text(FAST_CONFIG.replace("gateway:\n", "gateway:\n  breaker_failures: 3\n" + gateway)
                    + "loop:\n  eval_samples: 6\n  stages: [[3, 0]]\n  meta_timeout_s: 120\n" + extra)
    return str(path)


def loop_args(tmp_path, config: str, *more: str) -> list[str]:
    return ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
            "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config, *more]


def nodes(run_dir: Path) -> dict:
    return {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}


def is_meta(request: dict) -> bool:
    opening = " ".join(str(m["content"]) for m in request["messages"][:2])
    return "/workspace" in opening and "/feedback" in opening


def test_a_meta_agent_whose_calls_all_fail_or_are_all_malformed_is_failed_and_says_why(tmp_path, fake_openai):
    # Generation 1's meta agent asks for replies slower than the gateway waits (a timeout: the
    # provider's failure, yet one agent code can cause), while the provider answers the gateway's
    # own probe at once: the run goes on, and the node says why it failed. Generation 2's meta
    # agent writes only tool calls that cannot be read.
    def respond(request: dict) -> str:
        if not is_meta(request):
            return '<json>{"response": "incorrect"}</json>'
        if "Iterations left in this run: 1." in str(request["messages"][1]["content"]):  # generation 1
            time.sleep(2.5)
            return "too late"
        return "<json>{this is not json</json>"

    fake_openai.set_responder(respond)
    config = loop_config(tmp_path, "  meta_max_calls: 3\n", gateway="  request_timeout_s: 1\n  max_retries: 1\n")
    r = run_cli("run_optimization", *loop_args(tmp_path, config, "--max_generation", "2"),
                env=cli_env(fake_openai, TQDM_DISABLE="1"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(tmp_path / "out" / "run")
    assert found["1"]["status"] == "meta_failed"
    assert found["1"]["error"] == "meta agent: every model call failed at the provider (1 calls)"
    assert found["2"]["status"] == "meta_failed"
    assert found["2"]["error"] == "meta agent: all 3 tool calls were malformed"
    assert "node 1: meta_failed" in r.stdout and "node 2: meta_failed" in r.stdout and "no_change" not in r.stdout


def student_answer(request: dict) -> str | None:
    """The row a task request grades (its student's answer, as in tests/test_loop.py), or None."""
    user = str((request.get("messages") or [{}])[-1].get("content"))
    if "## Student's answer" not in user or MARKER in user:  # MARKER: node 1's task agent, not the initial one
        return None
    return user.split("## Student's answer\n", 1)[1].rsplit("\n\nThink the verification", 1)[0].strip()


def rows_asked(server: FakeOpenAI) -> list[str]:
    """The rows the initial node's task agent asked the provider about."""
    return [a for r in server.requests if (a := student_answer(r.get("json") or {}))]


def answers_by_id() -> dict[str, str]:
    data = REPO_ROOT / "domains" / "imo" / "data"
    return {r["Grading ID"]: r["Response"].strip() for split in ("train", "val")
            for r in pd.read_csv(data / f"gradingbench_filtered_100_{split}.csv").to_dict("records")}


def finished_rows(run_dir: Path) -> dict[str, dict]:
    """Rows finished in any evaluation of the run, by id (a full run starts from its staged run's rows)."""
    journals = sorted((run_dir / "evals").glob("*/predictions.jsonl"))
    return {rec["id"]: rec for p in journals for rec in journal(p.parent)}


def stopped_run(tmp_path, server: FakeOpenAI, args: list[str], outage_when, stopped=lambda: None) -> str:
    """Run the loop until `outage_when(run_dir)` holds, then stop `server` (the provider goes away;
    `stopped()` is told); the run must stop with one line and exit 75. Returns that line."""
    run_dir = tmp_path / "out" / "run"
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *args], cwd=REPO_ROOT,
                            env=cli_env(server, TQDM_DISABLE="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(lambda: proc.poll() is not None or (run_dir.exists() and outage_when(run_dir)), 300, "the outage")
        server.stop()
        stopped()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PROVIDER_DOWN, (out[-2000:], err[-3000:])
    assert len(err.strip().splitlines()) == 1, err[-3000:]
    return err.strip()


def test_an_outage_stops_the_loop_records_nothing_from_it_and_a_resume_pays_nothing_twice(tmp_path):

    meta_calls = []
    config = loop_config(tmp_path)
    first_args = loop_args(tmp_path, config, "--max_generation", "1")
    resume_args = ["--resume_from", str(tmp_path / "out" / "run")]
    run_dir = tmp_path / "out" / "run"
    # 1. The provider goes away in the middle of the initial node's evaluation.
    with FakeOpenAI(responder({0: [IMPROVE]}, meta_calls, by_iterations_left=True), latency=0.3) as first:
        line = stopped_run(tmp_path, first, first_args, lambda d: len(finished_rows(d)) >= 4)
        asked_first = rows_asked(first)
    assert line.startswith("stopped: provider for openai/fake failed 3 times in a row: ") and "Connection error" in line
    assert line.endswith("nothing was recorded from the failed rows; to continue: "
                         + resume_command(run_dir, RunRequest()))
    assert nodes(run_dir) == {}  # no node record, so no score made of failed rows
    before = finished_rows(run_dir)
    assert before and all(not rec["error"] for rec in before.values())
    # 2. Back, it hangs on the second call of generation 1's meta agent, which made its change with
    # the first, and goes away.
    asked, released = threading.Event(), threading.Event()
    script = responder({0: [IMPROVE]}, meta_calls, by_iterations_left=True)

    def hanging(request: dict) -> str:
        if is_meta(request) and any(m["role"] == "assistant" for m in request["messages"]):
            asked.set()
            released.wait(60)
        return script(request)

    with FakeOpenAI(hanging) as second:
        line = stopped_run(tmp_path, second, resume_args, lambda d: asked.is_set(), released.set)
        asked_second = rows_asked(second)
    assert line.startswith("stopped: provider for openai/fake-meta failed in the meta agent's run (1/meta): ")
    events = [json.loads(x) for x in (run_dir / "archive.jsonl").read_text().splitlines()]
    assert not any(e["event"] == "meta_done" for e in events)  # its cut-short change is not kept
    assert set(nodes(run_dir)) == {"initial"} and nodes(run_dir)["initial"]["status"] == "ok"
    # 3. Back for good: the run finishes, every row scored, none of the rows finished before an
    # outage asked again.
    with FakeOpenAI(responder({0: [IMPROVE]}, meta_calls, by_iterations_left=True)) as third:
        r = run_cli("run_optimization", *resume_args, env=cli_env(third, TQDM_DISABLE="1"), timeout=600)
        asked_third = rows_asked(third)
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(run_dir)
    assert found["initial"]["status"] == "ok" and found["1"]["status"] == "ok"
    assert found["initial"]["samples"]["imo_grading"] == found["1"]["samples"]["imo_grading"] == {"train": 6, "val": 6}
    rows = finished_rows(run_dir)
    assert len(rows) == 12 and all(not rec["error"] for rec in rows.values())
    by_id = answers_by_id()
    done_first = {by_id[qid] for qid in before}
    assert done_first <= set(asked_first) and not done_first & set(asked_second + asked_third)
    # Each of the initial node's 12 rows (3 staged and 3 more train, 6 val) was asked after the first
    # outage at most once; rows in flight when it came were asked again, not the ones it finished.
    assert len(asked_second + asked_third) == len(set(asked_second + asked_third)) <= 12 - len(before)
