"""The evaluation firewall holds for a domain of the user's own (domains/spec.py) as for the bundled ones.

A spec domain's data lies wherever the user keeps it, outside the package, and its label and
hidden columns are the user's to name. A hostile task agent is evaluated on its val split through
the real command line (`python -m domains.harness --domain_spec`), and on every row looks for the
label, the hidden notes and its row's id: in its inputs, its environment (and every process's it can
see), what its worker was sent, every file name and every file it can read (the data files and the
spec at the paths the host has them, and a walk of its whole visible file system). The values are
markers no other file holds, and the agent's source never spells them, so finding one anywhere means
it got through.
"""

import json
import textwrap

import pandas as pd
import pytest

from support.backends import BACKENDS
from support.cli import FAST_CONFIG, cli_env, run_cli

PREFIX = ("QZV7", "SECRET")  # joined only at run time: the agent's source must not hold the markers
ROWS = 4

AGENT = '''
import json, os, sys

CONTEXT = json.loads(CONTEXT_JSON)
MARK = (CONTEXT["prefix"][0] + "-" + CONTEXT["prefix"][1]).encode()


def readable(path, limit=2**20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except (OSError, ValueError):
        return None


SYSTEM = {"/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/var/lib",
          os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}  # what no run writes to


def walk():
    """Every file the agent can see, but the kernel's pseudo files and the system's own trees."""
    for folder, dirs, files in os.walk("/", onerror=lambda e: None):
        dirs[:] = [d for d in dirs if os.path.realpath(os.path.join(folder, d)) not in SYSTEM]
        for name in files:
            yield os.path.join(folder, name)


class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.file = chat_history_file or ""

    def forward(self, inputs):
        import gc

        got = []
        if MARK in json.dumps(inputs).encode() or set(inputs) - {"domain", "question"}:
            got.append("inputs: " + json.dumps(inputs))
        if MARK in self.file.encode():
            got.append("transcript name: " + self.file)
        for obj in gc.get_objects():  # what the worker was sent, in its own process
            if type(obj) is dict and "inputs" in obj and MARK in json.dumps(obj, default=str).encode():
                got.append("worker message: " + json.dumps(obj, default=str)[:200])
        if MARK in str(os.environ).encode():
            got.append("environment")
        for pid in os.listdir("/proc"):
            for part in ("environ", "cmdline"):
                if pid.isdigit() and MARK in (readable(f"/proc/{pid}/{part}") or b""):
                    got.append(f"/proc/{pid}/{part}")
        for path in CONTEXT["host_files"]:
            if readable(path) is not None:
                got.append("host file: " + path)
        scanned = 0
        for path in walk():
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if MARK in path.encode():
                got.append("file name: " + path)
            data = readable(path)
            scanned += data is not None
            if data and MARK in data:
                got.append("file: " + path)
        return json.dumps({"got": got, "scanned": scanned}), []
'''


@pytest.mark.e2e
@pytest.mark.attack("task agent: looks for a spec domain's label and hidden columns in its inputs, the environment, "
                    "/proc and every file it can read")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_agent_learns_nothing_hidden_of_a_spec_domain(backend, tmp_path, fake_openai):
    task = tmp_path / "my_task"
    task.mkdir()
    mark = "-".join(PREFIX)
    for split in ("train", "val"):
        pd.DataFrame({"qid": [f"{mark}-ID-{split}-{i}" for i in range(ROWS)],  # spells no label, yet
                      "Question": [f"What is the capital of country {i}?" for i in range(ROWS)],
                      "Answer": [f"{mark}-LABEL-{split}-{i}" for i in range(ROWS)],
                      "Notes": [f"{mark}-NOTE-{split}-{i}" for i in range(ROWS)]}
                     ).to_csv(task / f"{split}.csv", index=False)
    spec = task / "secret.yaml"
    spec.write_text("name: secret_capitals\ndata: {train: train.csv, val: val.csv}\nid: qid\n"
                    "inputs: {question: Question}\nlabel: Answer\nhidden: [Answer, Notes]\nscorer: exact\n")
    host_files = [str(task / "train.csv"), str(task / "val.csv"), str(spec)]
    assert all(mark.encode() in open(p, "rb").read() for p in host_files[:2])  # what the agent would find there
    context = {"prefix": list(PREFIX), "host_files": host_files}
    agent = tmp_path / "hostile.py"
    agent.write_text(AGENT.replace("CONTEXT_JSON", repr(json.dumps(context))))
    assert mark not in agent.read_text()
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  row_timeout_s: 120\n  num_workers: 1\n"))

    r = run_cli("domains.harness", "--domain_spec", str(spec), "--subset", "val", "--agent_path", str(agent),
                "--output_dir", str(tmp_path / "out"), "--run_id", "r", "--model", "openai/fake",
                "--config", str(config), "--sandbox", backend, env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    df = pd.read_csv(tmp_path / "out" / "r" / "predictions.csv", dtype=str, keep_default_na=False)
    assert len(df) == ROWS and all(df["error"] == ""), list(df["error"])
    found = [json.loads(p) for p in df["prediction"]]
    assert all(f["scanned"] >= 5 for f in found)  # the walk ran: the trusted scripts, its own files
    assert [f["got"] for f in found] == [[]] * ROWS
    assert df["Answer"].str.startswith(mark).all()  # the host's own copy of the rows keeps them


def test_the_agent_source_would_find_the_markers(tmp_path):
    """The detector itself, run on the host over a file that holds a marker, finds it: a test that
    could not fail would prove nothing."""
    (tmp_path / "data.csv").write_text("-".join(PREFIX) + "-LABEL-0\n")
    scope = {}
    exec(textwrap.dedent(AGENT.replace("CONTEXT_JSON", repr(json.dumps(
        {"prefix": list(PREFIX), "host_files": []})))), scope)
    assert scope["MARK"] in scope["readable"](str(tmp_path / "data.csv"))
