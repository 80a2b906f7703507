"""A run started from an agent folder with the HyperAgents reference's interface (--initial_agent PATH).

The folder is written here in the reference's shape: `task_agent.py` and `meta_agent.py` at the
top, its own `agent/` and `utils/` packages, plain `litellm.completion` calls with the provider's
model name and no base URL, and `MetaAgent.forward(repo_path, eval_path, iterations_left)` without
this project's extra arguments. Beside them, what a checkout holds that is not agent code
(`domains/` with data, `outputs/`), which must stay out of the run. The fake provider answers
through the run's gateway: the sandbox has no other way out.
"""

import json
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

from support.cli import FAST_CONFIG, cli_env, run_loop

FILES = {
    "agent/__init__.py": "",
    "agent/base_agent.py": '''
        class AgentSystem:
            def __init__(self, model="openai/gpt-4o", chat_history_file="./chat_history.md"):
                self.model = model
                self.chat_history_file = chat_history_file
                if chat_history_file:
                    open(chat_history_file, "w").close()

            def log(self, text):
                if self.chat_history_file:
                    with open(self.chat_history_file, "a") as f:
                        f.write(str(text) + "\\n")
        ''',
    "utils/__init__.py": "",
    "utils/common.py": '''
        import json
        import re

        def extract_jsons(text):
            found = []
            for block in re.findall(r"<json>(.*?)</json>", text, re.DOTALL):
                try:
                    found.append(json.loads(block.strip()))
                except ValueError:
                    pass
            return found or None
        ''',
    "task_agent.py": '''
        import json

        import litellm

        from agent.base_agent import AgentSystem
        from utils.common import extract_jsons

        ANSWER = "incorrect"


        class TaskAgent(AgentSystem):
            def forward(self, inputs):
                prompt = "REF-TASK " + ANSWER + " " + json.dumps(inputs)[:200]
                reply = litellm.completion(model=self.model, messages=[{"role": "user", "content": prompt}],
                                           temperature=0.0, max_tokens=16384)
                text = reply["choices"][0]["message"]["content"]
                self.log(text)
                found = extract_jsons(text)
                prediction = found[-1]["response"] if found and "response" in found[-1] else "None"
                return prediction, [{"role": "user", "text": prompt}, {"role": "assistant", "text": text}]
        ''',
    "meta_agent.py": '''
        import os

        import litellm

        from agent.base_agent import AgentSystem


        class MetaAgent(AgentSystem):
            def forward(self, repo_path, eval_path, iterations_left=None):
                seen = sorted(os.listdir(eval_path))
                prompt = f"REF-META repo={repo_path} evals={seen} left={iterations_left}"
                reply = litellm.completion(model=self.model, messages=[{"role": "user", "content": prompt}])
                label = reply["choices"][0]["message"]["content"].strip()
                path = os.path.join(repo_path, "task_agent.py")
                with open(path) as f:
                    code = f.read()
                with open(path, "w") as f:
                    f.write(code.replace('ANSWER = "incorrect"', f'ANSWER = "{label}"'))
        ''',
    "README.md": "A self-improving system, in the reference's shape.\n",
    "domains/imo/secret_labels.csv": "Grading ID,Reward\nx,Correct\n",
    "outputs/old_run/log.txt": "not agent code\n",
}


def write_agent_folder(root: Path) -> Path:
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def responder(request: dict) -> str:
    prompt = str(request["messages"][-1]["content"])
    if prompt.startswith("REF-META"):
        return "correct"  # the meta agent writes this label into the task agent
    if prompt.startswith("REF-TASK"):
        label = prompt.split()[1]
        return f'Here it is.\n<json>{{"response": "{label}"}}</json>'
    return "ok"


@pytest.mark.e2e
def test_a_reference_shaped_agent_folder_runs_with_its_own_code_through_the_gateway(tmp_path, fake_openai):
    folder = write_agent_folder(tmp_path / "ref_agent")
    config = tmp_path / "loop.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 10\n  meta_timeout_s: 120\n")
    fake_openai.set_responder(responder)
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--initial_agent", str(folder),
                 config=config, env=cli_env(fake_openai))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"initial agents from the folder {folder}" in r.stdout
    run_dir = tmp_path / "out" / "run"
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}
    initial, child = nodes["initial"], nodes["1"]
    # The folder's own code ran: the initial agent answers "incorrect"; the meta agent, called the
    # reference's way (no try command, no tool cap), changed it to "correct", and it was evaluated.
    assert initial["status"] == child["status"] == "ok", child
    assert 'ANSWER = "correct"' in (run_dir / "nodes" / "1" / "patch.diff").read_text()
    assert child["scores"]["imo_grading"] != initial["scores"]["imo_grading"]
    # Plain litellm calls with the provider's model name reached the provider through the gateway,
    # which booked them to the node's roles.
    asked = [req for req in fake_openai.requests if req.get("json")]
    by_kind = {kind: [req["json"] for req in asked
                      if str(req["json"]["messages"][-1]["content"]).startswith(kind)]
               for kind in ("REF-TASK", "REF-META")}
    assert by_kind["REF-META"] and by_kind["REF-TASK"]
    assert {req["model"] for req in by_kind["REF-META"]} == {"fake-meta"}
    assert {req["model"] for req in by_kind["REF-TASK"]} == {"fake"}
    assert all(req["max_tokens"] == 16384 and req["temperature"] == 0 for req in by_kind["REF-TASK"])
    meta_prompt = by_kind["REF-META"][0]["messages"][-1]["content"]
    assert "repo=/workspace" in meta_prompt and "left=0" in meta_prompt and "'initial'" in meta_prompt
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    roles = dict(db.execute("SELECT role, COUNT(*) FROM calls WHERE node = '1' GROUP BY role").fetchall())
    assert roles.get("meta") == 1 and roles.get("task", 0) >= 10
    # The run's repository holds the folder's agent code, and none of what is not agent code.
    listing = subprocess.run(["git", "--git-dir", str(run_dir / "repo"), "ls-tree", "-r", "--name-only",
                              "refs/nodes/initial"], capture_output=True, text=True, check=True).stdout.split()
    assert set(listing) == {rel for rel in FILES if not rel.startswith(("domains/", "outputs/"))}
    # The run names the folder by its absolute path, so a resume from anywhere finds it.
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["config"]["loop"]["initial_agent"] == str(folder.resolve())


@pytest.mark.e2e
def test_a_folder_without_the_reference_entry_points_is_refused_in_one_line(tmp_path, fake_openai):
    folder = tmp_path / "not_an_agent"
    (folder / "agent").mkdir(parents=True)
    (folder / "task_agent.py").write_text("class TaskAgent: pass\n")
    config = tmp_path / "loop.yaml"
    config.write_text(FAST_CONFIG)
    r = run_loop(tmp_path, fake_openai, "--initial_agent", str(folder), config=config)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "has no meta_agent" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "run").exists()
    r = run_loop(tmp_path, fake_openai, "--initial_agent", "no_such_agent", config=config)
    assert r.returncode != 0 and "unknown initial agent 'no_such_agent'" in r.stderr and "Traceback" not in r.stderr


def test_calls_are_routed_to_the_gateway_unless_they_name_a_server(monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "inside"))
    try:
        from route import to_gateway
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("AGENT_GATEWAY_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AGENT_GATEWAY_KEY", "session-key")
    routed = to_gateway({"model": "anthropic/claude-sonnet-4-5", "messages": [], "custom_llm_provider": "anthropic",
                         "api_key": "sk-own"})
    assert routed == {"model": "hosted_vllm/anthropic/claude-sonnet-4-5", "messages": [],
                      "api_base": "http://127.0.0.1:9/v1", "api_key": "session-key"}
    assert to_gateway({"model": "hosted_vllm/openai/fake"})["model"] == "hosted_vllm/openai/fake"
    own = {"model": "openai/warm-up", "api_base": "http://127.0.0.1:5/v1", "api_key": "-"}
    assert to_gateway(own) == own  # a server it names itself (the loopback warm-up, the gateway) stays
    monkeypatch.delenv("AGENT_GATEWAY_URL")
    assert to_gateway({"model": "openai/x"}) == {"model": "openai/x"}  # outside a run: untouched
