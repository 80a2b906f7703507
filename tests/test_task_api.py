"""hyperagents.Task: a task from examples in memory and a metric function, run through the same loop as a
spec domain (domains/spec.py). The metric runs on the host, in the process that scores, on a copy of the
user's own example; the run keeps the examples and a record that names the metric and imports nothing; a
resume takes the same Task again. The example of it on the Python API page (docs/api.md) runs with no key,
on the bundled local model."""

import json
import os
import re
import subprocess
import sys

import pytest

from hyperagents import ROW_ID, TASK_DATA, Task, _use_task
from services.errors import UserError
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env
from support.docs import DOCS, section
from test_spec_domain import answer

# A script that runs a Task on the fake provider: the metric notes each call (its process, the example's
# types) in CALLS, a file of the host.
SCRIPT = '''
import json, os, sys
from hyperagents import Task, UserError, run

calls_file, out, resume = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None
pairs = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Egypt", "Cairo"), ("Peru", "Lima"),
         ("Chile", "Santiago")]
examples = [{"question": f"What is the capital of {c}?", "answer": a, "rank": i, "notes": ["kept", i]}
            for i, (c, a) in enumerate(pairs)]

def right_city(prediction, example):
    with open(calls_file, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "rank_is_int": type(example["rank"]) is int,
                            "notes": example["notes"], "has_row_id": "row_id" in example}) + "\\n")
    return example["answer"].lower() == prediction.strip().lower()

task = Task(name="capitals", train=examples[:4], val=examples[4:], inputs=["question"], label="answer",
            metric=right_city)
if os.environ.get("CHANGED"):
    task = Task(name="capitals", train=examples[:3], val=examples[4:], inputs=["question"], label="answer",
                metric=right_city)
try:
    result = run(task=task, output_dir=out, run_id="run", resume_from=resume, config=os.environ["CONFIG"],
                 task_model="openai/fake", meta_model="openai/fake-meta", max_generation=int(os.environ["GENS"]))
except UserError as e:
    print("error:", e)
    sys.exit(2)
print("RESULT pid", os.getpid())
print("RESULT best", result.best.id, json.dumps({k: v.value for k, v in result.best.scores["capitals"].items()}))
'''


def run_script(tmp_path, fake, *args, gens=1, **env):
    script = tmp_path / "task_script.py"
    script.write_text(SCRIPT)
    config = tmp_path / "fast.yaml"
    config.write_text(FAST_CONFIG)
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=cli_env(fake, PYTHONPATH=str(REPO_ROOT), CONFIG=str(config),
                                                              GENS=str(gens), **env))


@pytest.mark.e2e
def test_a_task_runs_through_the_loop_scored_by_its_metric_on_the_host(tmp_path, fake_openai):
    fake_openai.set_responder(answer)
    calls, out = tmp_path / "calls.jsonl", tmp_path / "out"
    r = run_script(tmp_path, fake_openai, calls, out)
    assert r.returncode == 0, r.stderr[-3000:]
    pid = int(re.search(r"^RESULT pid (\d+)$", r.stdout, re.M).group(1))
    best = re.search(r"^RESULT best (\S+) (.*)$", r.stdout, re.M)
    assert best.group(1) == "1" and json.loads(best.group(2)) == {"train": 1.0, "val": 1.0}  # the edit helped
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    assert seen and all(c["pid"] == pid for c in seen)  # the user's own process: the host, never a sandbox
    assert all(c["rank_is_int"] and c["notes"][0] == "kept" and not c["has_row_id"] for c in seen)
    run_dir = out / "run"
    record = json.loads((run_dir / "domain_specs" / "capitals.json").read_text())
    assert record["scorer"] == "task:right_city" and record["label"] == "answer" and record["id"] == ROW_ID
    assert sorted(record["hidden"]) == ["notes", "rank"] and record["inputs"] == {"question": "question"}
    assert "right_city(" not in json.dumps(record) and record["scorer_sha256"]  # named, never its code
    assert sorted(os.listdir(run_dir / TASK_DATA)) == ["train.jsonl", "val.jsonl"]
    # A resume takes the same Task again, and refuses another one in one line.
    r = run_script(tmp_path, fake_openai, calls, out, run_dir, gens=2)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_script(tmp_path, fake_openai, calls, out, run_dir, gens=3, CHANGED="1")
    assert r.returncode == 2 and "error: run: the run" in r.stdout and "was not started with this Task (the " \
        "data of split train (sha256) differs)" in r.stdout, r.stdout + r.stderr[-2000:]
    # Read from its folder alone (no Task), the run shows its scores and imports nothing.
    from hyperagents import load_run

    assert load_run(run_dir).nodes["1"].scores["capitals"]["val"].value == 1.0


def test_what_a_task_cannot_be_is_one_line(tmp_path):
    good = {"train": [{"q": "a?", "a": "b"}], "inputs": ["q"], "label": "a", "metric": lambda p, e: True}
    for changes, says in (({"train": []}, "train holds no example"),
                          ({"train": [{"q": "a?"}]}, "train example 0 has no key 'a'"),
                          ({"train": [{"q": "a?", "a": "b", ROW_ID: "x"}]}, f"has the key '{ROW_ID}'"),
                          ({"train": ["not a mapping"]}, "train example 0 is not a mapping of text keys"),
                          ({"train": [{"q": "a?", "a": object()}]}, "a value JSON cannot write"),
                          ({"metric": "exact"}, "metric must be a function"),
                          ({"inputs": ["q", "a"]}, "the label none of them"),
                          ({"name": "Capitals!"}, "is not a domain name"),
                          ({"name": "imo_grading"}, "a domain named imo_grading exists already")):
        with pytest.raises(UserError, match=re.escape(says)):
            _use_task(Task(**{**good, **changes}), tmp_path / "run", resumed=False)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "run.json").write_text("{}")
    with pytest.raises(UserError, match="already holds a run"):
        _use_task(Task(**good), tmp_path / "old", resumed=False)
    assert not (tmp_path / "old" / TASK_DATA).exists()


def task_example() -> str:
    """The Python API page's example of a Task (docs/api.md), the one it shows."""
    blocks = re.findall(r"```python\n(.*?)```", section(DOCS / "api.md", "Python API"), re.S)
    (example,) = [block for block in blocks if "Task(" in block]
    return example


def test_the_api_page_shows_a_task_example_that_needs_no_key():
    example = task_example()
    assert "from hyperagents import Task" in example and "run(task=task" in example
    assert "_model=" not in example  # the models are left to choose: with no key, the bundled local one


@pytest.mark.e2e
def test_the_docs_task_example_runs_with_no_key_on_the_local_model(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    r = subprocess.run([sys.executable, "-c", task_example()], cwd=tmp_path, capture_output=True, text=True,
                       timeout=1800, env={**env, "PYTHONPATH": str(REPO_ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    assert "task local/smollm2-135m, meta local/smollm2-135m" in r.stdout
    assert re.search(r"^finished initial \{'train': Score\(value=", r.stdout, re.M) or \
        re.search(r"^finished \S+ \{", r.stdout, re.M), r.stdout[-2000:]
    (run_dir,) = (tmp_path / "outputs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["domains"] == ["capitals"]
