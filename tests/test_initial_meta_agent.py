"""loop.initial_meta_agent: which meta agent a run that starts from a project task agent starts with.

`default`: the project's meta agent beside the project's agent code. `paper`: as the reference's
BetterGrader run starts (its baselines/imo_grading/proofautograder.py copied over its task_agent.py),
the paper folder's one-line meta agent and agent code with ProofAutoGrader written for them as
task_agent.py. The paired task agent runs here in a child interpreter whose imports come from the
workspace, its litellm talking to the fake provider.
"""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optimizer.initial_agents import AgentFolder, InitialAgent, get_initial_agent, plan_text
from services.config import PROJECT_ROOT
from services.errors import UserError
from services.workspace import copy_evolvable
from support.cli import FAST_CONFIG, cli_env, run_loop
from task_agent.baselines import proofautograder

PAPER = PROJECT_ROOT / "initial_agents" / "paper"
INPUTS = {"domain": "imo_grading", "problem": "PROBLEM-TEXT", "solution": "REFERENCE-TEXT",
          "grading_guidelines": "GUIDELINES-TEXT", "student_answer": "STUDENT-TEXT"}


def workspace(tmp_path: Path, meta_agent: str) -> Path:
    """A fresh copy of the project's agent code made into the initial node's, as a new run makes it."""
    ws = copy_evolvable(PROJECT_ROOT, tmp_path / "ws")
    get_initial_agent("proofautograder", ["imo_grading"], meta_agent).apply(ws)
    return ws


def test_by_default_proofautograder_starts_with_the_projects_meta_agent(tmp_path):
    agent = get_initial_agent("proofautograder", ["imo_grading"])
    assert isinstance(agent, InitialAgent)
    ws = workspace(tmp_path, "default")
    assert (ws / "meta_agent" / "meta_agent.py").is_file() and (ws / "task_agent" / "baselines").is_dir()
    assert "task_agent.baselines.proofautograder import TaskAgent" in (ws / "task_agent" / "__init__.py").read_text()
    assert plan_text("proofautograder") == ("initial task agent proofautograder, with the project's meta agent "
                                            "(meta_agent/)")


def test_under_paper_it_is_the_reference_folder_with_proofautograder_as_its_task_agent(tmp_path):
    agent = get_initial_agent("proofautograder", ["imo_grading", "imo_proof_grading"], "paper")
    assert isinstance(agent, AgentFolder) and agent.bundled and agent.name == "proofautograder"
    ws = workspace(tmp_path, "paper")
    names = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file())
    paper = sorted(p.relative_to(PAPER).as_posix() for p in PAPER.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.parts[len(PAPER.parts)] != "baselines")
    assert names == paper  # the folder's files and no others: no baselines/, no project agent code
    assert (ws / "task_agent.py").read_bytes() == (PAPER / "baselines/imo_grading/proofautograder.py").read_bytes()
    assert (ws / "meta_agent.py").read_bytes() == (PAPER / "meta_agent.py").read_bytes()
    assert plan_text("proofautograder", "paper") == (
        "initial task agent proofautograder as the reference's task_agent.py, with the reference's one-line meta "
        "agent and agent code (initial_agents/paper; loop.initial_meta_agent paper)")


def test_paper_keeps_the_task_agents_domains_and_the_project_meta_agent_for_agents_the_reference_never_ran():
    with pytest.raises(UserError, match="does not do imo_proof"):
        get_initial_agent("proofautograder", ["imo_proof"], "paper")
    assert isinstance(get_initial_agent("proof_solver", ["imo_proof"], "paper"), InitialAgent)
    assert get_initial_agent("paper", ["imo_grading"], "paper").name == "paper"
    with pytest.raises(UserError, match="initial_meta_agent"):
        get_initial_agent("proofautograder", ["imo_grading"], "Paper")


def in_workspace(ws: Path, code: str, env: dict) -> object:
    """Run `code` in a child Python whose imports come from `ws`; the value it leaves in `result`."""
    script = ("import json, os, sys\nsys.path.insert(0, os.getcwd())\n" + textwrap.dedent(code)
              + "\nprint('RESULT ' + json.dumps(result))\n")
    proc = subprocess.run([sys.executable, "-I", "-B", "-c", script], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])


def reference_label(text: str) -> str:
    """The reference's reading (baselines/imo_grading/proofautograder.py), written out as the oracle."""
    block = re.search(r"<points>(.*?)</points>", text, re.DOTALL)
    digits = re.search(r"\d+", block.group(1)) if block else None
    return {0: "incorrect", 1: "partial", 6: "almost", 7: "correct"}.get(int(digits.group()), "None") \
        if digits else "None"


REPLIES = ["Sound.\n<points>7 out of 7</points>", "<points>\n6 out of 7\n</points>", "<points>1</points> <points>7",
           "<points>-0 out of 7</points>", "<points>4 out of 7</points>", "<points>seven</points>", "no tag at all",
           "<points>٧ out of 7</points>", "</points><points>6</points>", "<POINTS>7</POINTS>"]


def test_the_paired_task_agent_samples_and_reads_as_the_references_grader(tmp_path, fake_openai):
    ws = workspace(tmp_path, "paper")
    env = {k: v for k, v in cli_env(fake_openai).items() if not k.startswith("AGENT_GATEWAY")}
    fake_openai.set_replies(REPLIES)
    labels = in_workspace(ws, f"""
        from task_agent import TaskAgent, grading_prompt
        agent = TaskAgent(model="openai/fake", chat_history_file={str(tmp_path / 'chat.md')!r})
        result = [[agent.forward({INPUTS!r})[0] for _ in range({len(REPLIES)})], grading_prompt({INPUTS!r}),
                  agent.forward({{"problem": "P"}})]
    """, env)
    assert labels[0] == [reference_label(r) for r in REPLIES]
    assert labels[1] == proofautograder.grading_prompt(INPUTS)  # the project's wording, one text in both
    assert labels[2] == [None, []]  # a row missing inputs: no prediction, no call
    requests = [r["json"] for r in fake_openai.requests]
    assert len(requests) == len(REPLIES)
    for request in requests:
        assert (request["temperature"], request["max_tokens"]) == (0, 16384)
        (message,) = request["messages"]
        assert message == {"role": "user", "content": "\n\n" + labels[1]}  # the tool loop's empty preamble




@pytest.mark.e2e
def test_the_dry_run_says_which_meta_agent_proofautograder_starts_with(tmp_path, fake_openai):
    config = tmp_path / "fast.yaml"
    config.write_text(FAST_CONFIG)
    for setting, line in (("paper", plan_text("proofautograder", "paper")),
                          ("default", plan_text("proofautograder", "default"))):
        r = run_loop(tmp_path, fake_openai, "--initial_agent", "proofautograder", "--preset", "paper", "--set",
                     f"loop.initial_meta_agent={setting}", "--dry_run", config=config)
        assert r.returncode == 0, r.stderr
        assert f"agent    {line}" in r.stdout
