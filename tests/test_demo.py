"""The no-key first hour (issue 37): the default task agent never answers with its format's placeholder, and
`python -m run_optimization --preset demo` shows the loop at work with the bundled local model as the task agent
and a meta agent that replays meta_agent/demo_script.py (meta_agent/replay.py), saying so in its plan.

The e2e test runs the real command with no provider key: the bundled SmolLM2-135M answers examples/capitals,
the replayed edits go through the sandbox, capture, commit and evaluation as any, and the run must end within
3 minutes on a 2-core machine with a child that beats the initial node."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from services.config import PROJECT_ROOT, load_config
from support.cli import REPO_ROOT, run_cli

LOCAL = "local/smollm2-135m"
# What the default task agent used to show as the answer's value, which the local model copied word for word.
OLD_PLACEHOLDERS = ("your final answer", "your complete proof")
INPUTS = {
    "capitals": {"domain": "capitals", "question": "What is the capital of Peru?"},
    "imo_answer": {"domain": "imo_answer", "problem": "Find 2 + 3."},
    "imo_proof": {"domain": "imo_proof", "problem": "Prove that 1 + 1 = 2."},
}


def no_keys_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO_ROOT)}


def demo_command() -> list[str]:
    """The README's first command: the preset names its domain (loop.domains)."""
    return ["run_optimization", "--preset", "demo"]


# -- the default task agent and its placeholder ------------------------------------------------------------
@pytest.mark.parametrize("domain", sorted(INPUTS))
@pytest.mark.parametrize("reply", [
    '<json>{"response": "your final answer"}</json>',
    '<json>{"reasoning": "The answer is below.", "response": "Your final answer"}</json>',
    '{"response": "your complete proof"}',
    "your final answer",
    '<json>{"response": "..."}</json>',
])
def test_the_default_task_agent_never_returns_a_placeholder(domain, reply, gateway_factory, fake_openai, monkeypatch,
                                                             tmp_path):
    from task_agent import TaskAgent

    gw = gateway_factory()
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", ["openai/fake"]))
    monkeypatch.setenv("AGENT_STRUCTURED_MODELS", "openai/fake")  # as the local model: the schema is sent
    fake_openai.set_replies([reply])
    prediction, history = TaskAgent("openai/fake", str(tmp_path / "t.md")).forward(INPUTS[domain])
    assert prediction == "None", (domain, reply)
    prompt = "\n".join(str(m["content"]) for m in history[:-1])
    assert not any(f'"{p}"' in prompt.lower() for p in OLD_PLACEHOLDERS), prompt
    schema = fake_openai.requests[-1]["json"]["response_format"]["schema"]
    assert list(schema["properties"])[-1] == "response"


def test_a_task_of_ones_own_is_shown_a_filled_example_and_answers_are_kept(gateway_factory, fake_openai, monkeypatch,
                                                                           tmp_path):
    from task_agent import TaskAgent
    from task_agent.task_agent import EXAMPLE_REPLY

    gw = gateway_factory()
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", ["openai/fake"]))
    fake_openai.set_replies(['<json>{"reasoning": "The capital of Peru is Lima.", "response": "Lima"}</json>'])
    prediction, history = TaskAgent("openai/fake", str(tmp_path / "t.md")).forward(INPUTS["capitals"])
    assert prediction == "Lima"
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[1]["content"] == EXAMPLE_REPLY and "What is the capital of Peru?" in history[2]["content"]
    assert "You are an expert working on a task" in history[2]["content"]  # what tests/test_spec_domain.py edits


# -- the replay ---------------------------------------------------------------------------------------------
def workspace(tmp_path: Path) -> Path:
    """A workspace as the demo's initial node has it: the project's agent code, the demo's entry points."""
    from optimizer.initial_agents import INITIAL_AGENTS

    ws = tmp_path / "workspace"
    for name in ("agent", "task_agent", "meta_agent"):
        shutil.copytree(PROJECT_ROOT / name, ws / name, ignore=shutil.ignore_patterns("__pycache__"))
    INITIAL_AGENTS["demo"].apply(ws)
    return ws


def run_in(ws: Path, code: str) -> dict:
    """`code` in a fresh interpreter with `ws` first on the path (as the sandbox has it); its last line, as JSON."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], cwd=ws, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ws)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_replay_makes_the_scripts_steps_in_turn_through_the_tool_loop(tmp_path):
    from meta_agent.demo_script import STEPS

    ws = workspace(tmp_path)
    assert "meta_agent.replay import MetaAgent" in (ws / "meta_agent" / "__init__.py").read_text()
    code = f"""
import json, sys
from meta_agent import MetaAgent
out = []
for g in range({len(STEPS) + 1}):
    messages = MetaAgent("{LOCAL}", "{tmp_path}/meta_%d.md" % g).forward("{ws}", "{tmp_path}/feedback", 3, None, 40)
    out.append(messages[-1]["content"])
from task_agent.task_agent import read_answer
out.append([read_answer("The capital of Mexico is Mexico City.", "What is the capital of Mexico?"),
            read_answer("Tokyo is the capital of Japan.", "What is the capital of Japan?"), read_answer("Lima", "?")])
print(json.dumps(out))
"""
    out = run_in(ws, code)
    for number, step in enumerate(STEPS, 1):
        assert out[number - 1].startswith("[replayed from meta_agent/demo_script.py")
        assert f"Step {number} of {len(STEPS)}: {step['title']}" in out[number - 1]
        assert step["marker"] in (ws / "task_agent" / "task_agent.py").read_text()
        transcript = (tmp_path / f"meta_{number - 1}.md").read_text()
        assert transcript.count("## user\n\nTool result:") == len(step["edits"]) + 1  # its edits, the import check
        assert "imports ok" in transcript and "Error" not in transcript
    assert "Nothing to replay: every step" in out[len(STEPS)]
    assert out[-1] == ["Mexico City", "Tokyo", "Lima"]


def test_the_replay_stops_on_a_task_agent_it_was_not_written_for_and_leaves_other_models_alone(tmp_path):
    ws = workspace(tmp_path)
    target = ws / "task_agent" / "task_agent.py"
    target.write_text(target.read_text().replace("class TaskAgent(AgentSystem):", "class TaskAgent(AgentSystem):  #"))
    before = target.read_text()
    code = f"""
import json
from meta_agent import MetaAgent
from meta_agent.replay import replays
messages = MetaAgent("{LOCAL}", None).forward("{ws}", "{tmp_path}/feedback", 1, None, 40)
print(json.dumps([messages[-1]["content"], replays("{LOCAL}"), replays("anthropic/claude-sonnet-4-5")]))
"""
    text, local, provider = run_in(ws, code)
    assert "step 1 of meta_agent/demo_script.py does not apply" in text and "No change" in text
    assert target.read_text() == before
    assert local and not provider


def test_the_demo_plan_says_the_edits_are_replayed():
    from optimizer.initial_agents import plan_text

    assert "REPLAYED from meta_agent/demo_script.py" in plan_text("demo")
    assert "REPLAYED from meta_agent/demo_script.py" in plan_text("demo", "default", LOCAL)
    assert "REPLAYED" not in plan_text("demo", "default", "anthropic/claude-sonnet-4-5")
    assert plan_text("default") == "initial task agent default, with the project's meta agent (meta_agent/)"


def test_the_presets_load():
    demo = load_config(None, "demo")
    assert demo.loop.initial_agent == "demo" and demo.loop.max_generation == 2
    quick = load_config(None, "quick")
    assert quick.loop.max_generation == 2 and quick.loop.meta_max_calls >= 3  # the browser tests' script needs 3


# -- the demo, for real -------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_demo_runs_with_no_key_in_under_three_minutes_and_a_child_beats_the_initial_node(tmp_path):
    started = time.monotonic()
    r = run_cli(*demo_command(), "--output_dir", str(tmp_path / "out"), "--run_id", "demo", env=no_keys_env(),
                cwd=tmp_path, timeout=600)
    seconds = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    plan = next(line for line in r.stdout.splitlines() if line.startswith("agent "))
    assert "REPLAYED from meta_agent/demo_script.py" in plan, plan
    assert f"task {LOCAL}, meta {LOCAL}" in r.stdout
    assert "domain   capitals:" in r.stdout  # named by the preset
    assert r.stdout.count("the meta agent replays the next step of meta_agent/demo_script.py") == 2, r.stdout
    run = tmp_path / "out" / "demo"
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run / "nodes").glob("*/node.json")}
    assert set(nodes) == {"initial", "1", "2"}, r.stdout[-3000:]
    val = {node_id: node["scores"]["capitals"]["val"] for node_id, node in nodes.items()}
    train = {node_id: node["scores"]["capitals"]["train"] for node_id, node in nodes.items()}
    assert all(n["status"] == "ok" and n["patch"]["files"] == 1 for k, n in nodes.items() if k != "initial"), nodes
    assert max(val["1"], val["2"]) > val["initial"], val  # a child beats the initial node
    # The default task agent scores above 0 with the local model, and never predicts a placeholder.
    assert train["initial"] + val["initial"] > 0, (train, val)
    for split in ("train", "val"):
        predictions = (run / "evals" / nodes["initial"]["eval_keys"]["capitals"][split] / "predictions.csv").read_text()
        assert not any(p in predictions.lower() for p in OLD_PLACEHOLDERS)
    for child in ("1", "2"):
        transcript = next((run / "untrusted" / child).rglob("meta_chat_history.md")).read_text()
        assert "[replayed from meta_agent/demo_script.py" in transcript
        assert "task_agent/task_agent.py" in (run / "nodes" / child / "patch.diff").read_text()
    with sqlite3.connect(run / "ledger.sqlite") as ledger:  # the replay asked no model; the try command did
        roles = {role for (role,) in ledger.execute("SELECT role FROM calls")}
    assert "meta" not in roles and {"task", "try"} <= roles
    assert (run / "report.html").is_file()
    assert seconds < 180, f"the demo took {seconds:.0f} s"
