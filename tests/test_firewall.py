"""The evaluation firewall end to end: a hostile task agent inside a harness run.

The agent is loaded by the harness's worker in the sandbox, exactly as an evolved
agent would be. What it tries is recorded on its rows; the run goes on.
"""

import json
import textwrap

import pandas as pd
import pytest

from conftest import FAST_CONFIG, cli_env, run_cli
from test_sandbox import BACKENDS, VAL_LABELS, host_listener  # noqa: F401 (a fixture)

SECRET = "sk-provider-secret-0123456789"  # what cli_env gives the harness as its provider key

HOSTILE_AGENT = """
import glob, json, os, sys, urllib.request
from agent.llm import get_response

def attempt(what, fn):
    try:
        fn()
        return what
    except BaseException as e:
        return None

class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.model = model

    def forward(self, inputs):
        answer = inputs["student_answer"]
        if answer == ROWS[1]:
            hog = bytearray(8 * 2**30)
            hog[::4096] = b"x" * len(hog[::4096])
        if answer == ROWS[2]:
            while True:
                pass
        if answer == ROWS[3]:
            while True:
                sys.stderr.write("x" * 65536)
        got = [
            attempt("read val labels", lambda: open(VAL).read()),
            attempt("reached host port", lambda: urllib.request.urlopen("http://127.0.0.1:PORT/", timeout=3).read()),
            attempt("wrote outside", lambda: open("/usr/owned", "w").write("x")),
        ]
        for path in glob.glob("/proc/*/environ"):
            got.append(attempt("secret in " + path, lambda: (_ for _ in ()).throw(OSError())
                               if SECRET.encode() not in open(path, "rb").read() else None))
        got.append("secret in env" if SECRET in str(os.environ) else None)
        got.append("labels in inputs" if {"Points", "Reward"} & set(inputs) else None)
        said = get_response([{"role": "user", "content": "grade"}], self.model).text
        return json.dumps({"leaks": [g for g in got if g], "llm": said}), []
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_agent_is_contained_and_every_attempt_recorded(backend, tmp_path, fake_openai, host_listener):
    rows = pd.read_csv(VAL_LABELS.with_name("gradingbench_filtered_100_train.csv"))["Response"].head(5).tolist()
    agent = tmp_path / "hostile.py"
    agent.write_text(textwrap.dedent(HOSTILE_AGENT).replace("ROWS", repr(rows)).replace("VAL", repr(str(VAL_LABELS)))
                     .replace("PORT", str(host_listener)).replace("SECRET", repr(SECRET)))
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  row_timeout_s: 8\n  num_workers: 1\n")
                      .replace("sandbox:\n", "sandbox:\n  memory_mb: 2048\n  output_cap_mb: 4\n"))
    fake_openai.set_replies(["looks fine"])
    r = run_cli("domains.harness", "--domain", "imo_grading", "--num_samples", "5", "--agent_path", str(agent),
                "--output_dir", str(tmp_path / "out"), "--run_id", "r", "--model", "openai/fake",
                "--config", str(config), "--sandbox", backend, env=cli_env(fake_openai), timeout=300)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "out/r/predictions.csv", dtype=str, keep_default_na=False)
    for i in (0, 4):
        assert json.loads(df["prediction"][i]) == {"leaks": [], "llm": "looks fine"}
    assert "MemoryError" in df["error"][1] or "worker died" in df["error"][1]
    assert df["error"][2] == "timeout after 8 s"
    assert "printing more than" in df["error"][3]
    assert json.loads((tmp_path / "out/r/run.json").read_text())["sandbox"] == backend
