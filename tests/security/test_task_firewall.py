"""The evaluation firewall holds for a hyperagents.Task (examples in memory, a metric function): its examples
become a spec domain's data in RUN/task_data/, and a hostile task agent (the initial agent of a run, through
`hyperagents.run(task=...)`) is evaluated on its train and val rows. On every row it looks for the label and
the hidden values, as the spec domain's attack does (test_spec_domain_firewall.py's agent): in its inputs,
its environment and every process's, what its worker was sent, the task's data files and the script at the
paths the host has them, and every file it can see. The metric, the user's own function on the host, gets
each row's findings as the prediction and writes them down: none may hold a marker."""

import json
import shutil
import subprocess
import sys

import pytest
from test_spec_domain_firewall import AGENT, PREFIX

from services.config import PROJECT_ROOT
from services.workspace import copy_evolvable
from support.backends import BACKENDS
from support.cli import FAST_CONFIG, cli_env

ROWS = 3

SCRIPT = '''
import json, sys
from hyperagents import Task, run

found_file, out, agent, config, backend = sys.argv[1:6]
mark = "-".join(json.loads(sys.argv[6]))

def rows(split):
    return [{"question": f"What is the capital of country {i}?", "answer": f"{mark}-LABEL-{split}-{i}",
             "notes": f"{mark}-NOTE-{split}-{i}"} for i in range(ROWS)]

def metric(prediction, example):  # the user's own function, on the host: it writes down what the agent found
    with open(found_file, "a") as f:
        f.write(prediction + "\\n")
    return True  # past screening: the val rows are evaluated too

task = Task(name="secret_capitals", train=rows("train"), val=rows("val"), inputs=["question"], label="answer",
            metric=metric)
run(task=task, output_dir=out, run_id="run", config=config, initial_agent=agent, sandbox=backend,
    task_model="openai/fake", meta_model="openai/fake-meta", max_generation=0)
'''.replace("ROWS", str(ROWS))


@pytest.mark.e2e
@pytest.mark.attack("task agent: looks for a hyperagents.Task's label and hidden values (examples given in memory, "
                    "kept in RUN/task_data/) in its inputs, the environment, /proc and every file it can read")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_agent_learns_nothing_hidden_of_a_task(backend, tmp_path, fake_openai):
    mark, out = "-".join(PREFIX), tmp_path / "out"
    script = tmp_path / "task_script.py"
    script.write_text(SCRIPT)
    host_files = [str(out / "run" / "task_data" / "train.jsonl"), str(out / "run" / "task_data" / "val.jsonl"),
                  str(script), str(out / "run" / "domain_specs" / "secret_capitals.json")]
    agent = tmp_path / "hostile_agent"
    copy_evolvable(PROJECT_ROOT, agent)
    shutil.rmtree(agent / "task_agent" / "baselines", ignore_errors=True)
    (agent / "task_agent" / "task_agent.py").write_text(
        AGENT.replace("CONTEXT_JSON", repr(json.dumps({"prefix": list(PREFIX), "host_files": host_files}))))
    assert mark not in (agent / "task_agent" / "task_agent.py").read_text()
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  row_timeout_s: 120\n  num_workers: 1\n"))
    found = tmp_path / "found.jsonl"
    r = subprocess.run([sys.executable, str(script), str(found), str(out), str(agent), str(config), backend,
                        json.dumps(list(PREFIX))], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                       env=cli_env(fake_openai, PYTHONPATH=str(PROJECT_ROOT)))
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    rows = [json.loads(line) for line in found.read_text().splitlines()]
    assert len(rows) >= 2 * ROWS  # every train and val row was answered and scored
    assert all(row["scanned"] >= 5 for row in rows)  # the walk ran
    assert [row["got"] for row in rows] == [[]] * len(rows)
    assert all(mark in open(p).read() for p in host_files[:2])  # the host's own copy keeps them
