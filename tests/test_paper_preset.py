"""`--preset paper` end to end: the reference's agents, screening, selection inputs and meta-failure rule.

The fake provider plays both models of the paper's agents (initial_agents/paper). As the meta
model it follows a script per meta run, written as the reference's text tool calls; as the
task model it answers "incorrect" unless the task prompt carries a marker that a scripted edit
put there. The run's `parent_chosen` events are then checked against the reference's parent
selection computed by hand from the node records (tests/test_paper_semantics.py has the same
formulas on a built archive).
"""

import json
import math
import re

import pandas as pd
import pytest

from services.config import PROJECT_ROOT
from support.cli import FAST_CONFIG, run_loop

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

DATA = PROJECT_ROOT / "domains" / "imo" / "data"
ROWS = {split: [(repr(r["Response"]), r["Reward"]) for r in
                pd.read_csv(DATA / f"gradingbench_filtered_100_{split}.csv").to_dict("records")]
        for split in ("train", "val")}
FRACTION = 10 / 100  # the reference's staged fraction for imo_grading


def edit(marker: str) -> dict:
    return {"tool_name": "editor", "tool_input": {
        "command": "str_replace", "path": "/workspace/task_agent.py",
        "old_str": "You are acting as an agent.", "new_str": f"{marker} You are acting as an agent."}}


SCRIPT = {
    1: [edit("MARKER-RIGHT")],  # answers every row right: past the screening, evaluated in full
    2: [edit("MARKER-VAL-ONLY")],  # right on val rows only: stops at the screening with 10 val rows
    3: [edit("MARKER-RIGHT"), {"tool_name": "bash", "tool_input": {"command": "kill -9 $PPID"}}],  # dies
    4: [],  # changes nothing
}


def responder(meta_runs: list):
    def respond(request: dict) -> str:
        messages = request["messages"]
        if "Change any part of the code base at `/workspace`" in str(messages[0]["content"]):
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if turn == 0:
                meta_runs.append(request)
            actions = SCRIPT.get(len(meta_runs), [])
            return f"<json>{json.dumps(actions[turn])}</json>" if turn < len(actions) else "Done."
        prompt = str(messages[-1]["content"])
        if "'domain': 'imo_grading'" not in prompt:
            return "ok"
        split, label = next((s, label) for s, rows in ROWS.items() for key, label in rows if key in prompt)
        # An edit puts its marker after the parent's, just before the prompt's first words: the last
        # marker is the latest edit's.
        found = sorted((prompt.rindex(m), m) for m in ("MARKER-RIGHT", "MARKER-VAL-ONLY") if m in prompt)
        latest = found[-1][1] if found else None
        if latest == "MARKER-VAL-ONLY":
            answer = label.lower() if split == "val" else "unsure"  # every train row wrong, every val row right
        else:
            answer = label.lower() if latest == "MARKER-RIGHT" else "incorrect"
        return f'<json>{{"response": "{answer}"}}</json>'

    return respond


def reference_probabilities(nodes: dict[str, dict], upto: int) -> dict[str, float]:
    """The reference's select_parent(method="score_child_prop") over the nodes of generations <= upto."""
    seen = {i: n for i, n in nodes.items() if n["generation"] <= upto}
    barred = {n["parent"] for n in seen.values() if n["status"] == "meta_failed" or n.get("meta_error")}
    scores = {}
    for i, n in seen.items():
        if i != "initial" and (n["status"] != "ok" or i in barred):
            continue
        val = n["scores"].get("imo_grading", {}).get("val")
        if val is not None:
            scaled = i == "initial" or not n["full_eval"].get("imo_grading")
            scores[i] = val * (FRACTION if scaled else 1)
    children = {i: sum(1 for n in seen.values() if n["parent"] == i) for i in scores}
    mid = sum(sorted(scores.values(), reverse=True)[:3]) / min(3, len(scores))
    weights = {i: 1 / (1 + math.exp(-10 * (s - mid))) * math.exp(-((children[i] / 8) ** 3))
               for i, s in scores.items()}
    return {i: w / sum(weights.values()) for i, w in weights.items()}


def test_the_paper_preset_runs_and_chooses_parents_as_the_reference_does(tmp_path, fake_openai):
    meta_runs = []
    fake_openai.set_responder(responder(meta_runs))
    config = tmp_path / "paper.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  meta_timeout_s: 120\n")
    r = run_loop(tmp_path, fake_openai, "--preset", "paper", "--max_generation", "4",
                 "--seed", "3", config=config, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "initial agents paper: the HyperAgents reference's generic task agent and one-line meta agent" in r.stdout
    assert "staged 10 train + val rows" in r.stdout
    run_dir = tmp_path / "out" / "run"
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}
    assert set(nodes) == {"initial", "1", "2", "3", "4"}
    one, two, three = nodes["1"], nodes["2"], nodes["3"]
    # The stage runs 10 train and 10 val rows; a node stopped there keeps both.
    assert one["full_eval"] == {"imo_grading": True} and one["samples"]["imo_grading"] == {"train": 100, "val": 100}
    assert two["full_eval"] == {"imo_grading": False} and two["samples"]["imo_grading"] == {"train": 10, "val": 10}
    assert two["scores"]["imo_grading"] == {"train": 0.0, "val": 1.0}
    # The meta agent of generation 3 died after its edit: as in the reference, no diff, nothing evaluated.
    assert three["status"] == "meta_failed" and three["scores"] == {} and three["full_eval"] == {}
    assert nodes["4"]["status"] == "no_change"
    # Every parent was drawn with the reference's probabilities, staged-only and initial nodes included.
    events = [json.loads(line) for line in (run_dir / "archive.jsonl").read_text().splitlines() if line.strip()]
    chosen = [e for e in events if e["event"] == "parent_chosen"]
    assert [e["generation"] for e in chosen] == [1, 2, 3, 4]
    for e in chosen:
        theirs = reference_probabilities(nodes, e["generation"] - 1)
        ours = {i: c["p"] for i, c in e["candidates"].items()}
        assert ours.keys() == theirs.keys(), (e["generation"], ours, theirs)
        assert all(abs(ours[i] - theirs[i]) < 1e-9 for i in ours), (e["generation"], ours, theirs)
        assert nodes[str(e["generation"])]["parent"] == e["parent"]
    third, last = chosen[2]["candidates"], chosen[3]["candidates"]
    assert abs(third["2"]["score"] - 1.0 * FRACTION) < 1e-12  # its 10 val rows x 10/100
    assert abs(last["initial"]["score"] - nodes["initial"]["scores"]["imo_grading"]["val"] * FRACTION) < 1e-12
    # With this seed generation 3 grew from node 2; its meta agent's death made node 2 no parent.
    assert three["parent"] == "2" and "2" in third and "2" not in last
    # The meta agent's whole instruction is one line; it had no try command.
    opening = str(meta_runs[0]["messages"][0]["content"])
    assert "try_agent" not in opening and opening.rstrip().endswith("as you see fit.")
    # Later meta agents can read earlier nodes' patches and train results, never val.
    assert "MARKER-RIGHT" in (run_dir / "feedback" / "1" / "patch.diff").read_text()
    # (under the preset's loop.feedback paper also transcripts of train rows, in agent_evals/ folders)
    assert not any("val" in re.split(r"[_.-]", p.name) for p in (run_dir / "feedback").rglob("*"))
