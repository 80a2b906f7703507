"""A scripted pair of models for runs of the loop on imo_grading (tests/support/fake_openai.py plays both).

As the meta model it follows a script of tool calls per generation; as the task model it grades
"incorrect" unless the prompt carries MARKER, the word the scripted improving edit (IMPROVE) adds,
in which case it answers with the true label (looked up in the data by the student's answer), so
the improved agent scores 1.0 and a run must find, fully evaluate and select it."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from services.config import PROJECT_ROOT
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env

DATA = PROJECT_ROOT / "domains" / "imo" / "data"
MARKER = "GRADE-CAREFULLY-7"
TRUTH = {r["Response"].strip(): r["Reward"] for split in ("train", "val", "test")
         for r in pd.read_csv(DATA / f"gradingbench_filtered_100_{split}.csv").to_dict("records")}

IMPROVE = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": "You are an expert grader", "new_str": f"{MARKER} You are an expert grader"}}
META_ONLY = {"tool_name": "bash", "tool_input": {"command": "echo '# notes' >> /workspace/meta_agent/__init__.py"}}
MUTATE_META = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/meta_agent/meta_agent.py",
    "old_str": "You improve an AI agent system", "new_str": "MUTATED META PROMPT. You improve an AI agent system"}}


def tool_call(action: dict) -> str:
    """A meta-model reply asking for one tool call, in the format the meta agent parses."""
    return f"I will do this.\n<json>{json.dumps(action)}</json>"


def responder(script: dict[int, list[dict]], meta_calls: list, by_iterations_left: bool = False):
    """Meta runs follow `script[n]` for the n-th run (a run starts with a request that has no
    assistant turn yet), or with `by_iterations_left`, `script[k]` for the run told that k
    iterations are left (the same for a run redone after a kill); task prompts are graded
    as described above."""
    runs = []

    def respond(request: dict) -> str:
        messages = request["messages"]
        opening = " ".join(str(m["content"]) for m in messages[:2])
        if "/workspace" in opening and "/feedback" in opening:
            meta_calls.append(request)
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if turn == 0:
                runs.append(len(runs) + 1)
            if by_iterations_left:
                left = int(opening.split("Iterations left in this run: ", 1)[1].split(".", 1)[0])
                actions = script.get(left, [])
            else:
                actions = script.get(runs[-1], [])
            return tool_call(actions[turn]) if turn < len(actions) else "Done: the change is in place."
        user = str(messages[-1]["content"])
        if "## Student's answer" in user:
            answer = user.split("## Student's answer\n", 1)[1].rsplit("\n\nThink the verification", 1)[0]
            label = TRUTH.get(answer.strip(), "Incorrect") if MARKER in user else "incorrect"
            return f'<json>{{"response": "{label.lower()}"}}</json>'
        return "ok"

    return respond


def one_edit(request: dict, edit: dict) -> str | None:
    """The project's meta agent's answer in a scripted run that makes one edit: `edit` as a tool call on its first
    turn, then "Done."; None when `request` is no meta agent's (it names neither /workspace nor /feedback)."""
    messages = request["messages"]
    opening = " ".join(str(m["content"]) for m in messages[:2])
    if "/workspace" not in opening or "/feedback" not in opening:
        return None
    turn = sum(1 for m in messages if m["role"] == "assistant")
    return f"I will do this.\n<json>{json.dumps(edit)}</json>" if turn == 0 else "Done."


def loop_config(tmp_path, gateway: str = "") -> str:
    """FAST_CONFIG plus `gateway` lines and a loop of 20 eval samples, written under tmp_path."""
    text = (FAST_CONFIG.replace("gateway:\n", "gateway:\n" + gateway)
            + "loop:\n  eval_samples: 20\n  meta_timeout_s: 120\n")
    path = tmp_path / "loop.yaml"
    path.write_text(text)
    return str(path)


def nodes(run_dir: Path) -> dict:
    """The node.json of each node of a run, by node id."""
    return {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}


def events(run_dir: Path) -> list[dict]:
    """The lines of archive.jsonl read so far (a line cut by a kill is skipped)."""
    path = run_dir / "archive.jsonl"
    out = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def start_and_kill_when(tmp_path, fake, args: list[str], ready, timeout=180, env=None) -> None:
    """Start run_optimization (in `env`, default cli_env(fake)), SIGKILL it as soon as `ready(run_dir)` holds."""
    run_dir = tmp_path / "out" / "run"
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *args], cwd=REPO_ROOT, env=env or cli_env(fake),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None:
            if run_dir.exists() and ready(run_dir):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the kill point"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
