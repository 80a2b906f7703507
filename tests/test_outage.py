"""A provider that fails is an infrastructure event, never the agent's answer (issue 26).

The provider is a real local server (tests/fake_openai.py) of the test's own, stopped by its
handle in the middle of a run: the run stops with one line and a non-zero exit, keeps nothing
from the rows the outage touched, and a resume with the provider back finishes every row
without paying twice for one. What counts as a provider failure is the gateway's to say, from
its own calls: an agent's text saying so is its answer.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from fake_openai import FakeOpenAI

from services.errors import EXIT_PROVIDER_DOWN

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


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


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
    # One call fails after all its retries (6 attempts); the breaker's count never reaches 3. The
    # rows in flight then swallowed it and answered; they are run again instead of kept.
    fake_openai.latency = 0.2
    fake_openai.add_faults(["500"] * 6)
    config, agent = config_file(tmp_path), agent_file(tmp_path)
    r = run_cli("domains.harness", "--output_dir", str(tmp_path / "out"), "--run_id", "f",
                *harness_args(tmp_path, agent, config, 6), env=cli_env(fake_openai, TQDM_DISABLE="1"))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out" / "f" / "predictions.csv", dtype=str, keep_default_na=False)
    assert (df["prediction"] == "said").all() and (df["error"] == "").all()
    assert len(asked_rows(fake_openai)) > 6 + 5  # the failed call's attempts, and the rows run again


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
