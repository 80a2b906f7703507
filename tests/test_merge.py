"""Merges (loop.merge_every, issue 30): the second parent's choice as a pure function, and a merge
generation through the real loop (scripted meta agent on the fake provider): its meta agent sees the
second parent's code read-only and is told to combine them, the child records both parents, the
report draws both edges, and a run killed in the merge and resumed merges the same two."""

import pytest

from archive.selection import Candidate, merge_partner
from support.cli import cli_env, run_cli
from support.scripted_loop import events, loop_config, nodes, responder, start_and_kill_when


def cand(node_id, rows, score=0.5, order=0, parent="initial"):
    return Candidate(node_id, score, 0, order, order, parent, rows)


PARENTS = {"initial": None, "1": "initial", "2": "initial", "3": "1", "4": "2"}


def test_the_partner_is_of_another_lineage_and_better_where_the_first_is_not():
    first = cand("3", {"a": 1, "b": 1, "c": 0, "d": 0}, order=3, parent="1")
    ancestor = cand("1", {"a": 1, "b": 0, "c": 1, "d": 0}, order=1)  # complements 3, but is its ancestor
    narrow = cand("2", {"a": 0, "b": 1, "c": 1, "d": 0}, order=2)  # better on c only
    wide = cand("4", {"a": 0, "b": 0, "c": 1, "d": 1}, order=4, parent="2")  # better on c and d
    assert merge_partner([ancestor, narrow, first, wide], "3", PARENTS).node_id == "4"
    assert merge_partner([ancestor, narrow, first], "3", PARENTS).node_id == "2"
    dominated = cand("2", {"a": 0, "b": 0, "c": 0, "d": 0}, order=2)  # never better: no merge
    assert merge_partner([first, dominated], "3", PARENTS) is None
    assert merge_partner([cand("3", {}, order=3, parent="1"), wide], "3", PARENTS) is None  # no rows: no merge


def edit(marker: str) -> dict:
    return {"tool_name": "editor", "tool_input": {
        "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
        "old_str": "You are an expert grader", "new_str": f"{marker} You are an expert grader"}}


LOOK = {"tool_name": "bash", "tool_input": {"command": "ls /other_parent/task_agent"}}


def graders(script):
    """The scripted meta agent, and a task model that answers "correct" to every row when the task
    agent's prompt carries one marker, "partial" with the other (the initial agent says "incorrect")."""
    meta_calls, base = [], responder(script, [])

    def respond(request):
        user = str(request["messages"][-1]["content"])
        if "## Student's answer" in user and ("ALWAYS-CORRECT" in user or "ALWAYS-PARTIAL" in user):
            return '<json>{"response": "%s"}</json>' % ("correct" if "ALWAYS-CORRECT" in user else "partial")
        opening = " ".join(str(m["content"]) for m in request["messages"][:2])
        if "/workspace" in opening and "/feedback" in opening:
            meta_calls.append(request)
        return base(request)

    return respond, meta_calls


def merge_args(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    config = loop_config(tmp_path)
    with open(config, "a") as f:  # two islands keep generations 1 and 2 apart, both from the initial node
        f.write("  islands: 2\n  migrate_every: 100\n  merge_every: 3\n")
    return ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
            "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
            "--max_generation", "3", "--parent_selection", "islands", "--seed", "2"]


SCRIPT = {1: [edit("ALWAYS-CORRECT")], 2: [edit("ALWAYS-PARTIAL")], 3: [LOOK]}


@pytest.mark.e2e
def test_a_merge_generation_gets_a_complementary_second_parent_and_records_both(tmp_path, fake_openai):
    respond, meta_calls = graders(SCRIPT)
    fake_openai.set_responder(respond)
    straight = tmp_path / "straight"
    r = run_cli("run_optimization", *merge_args(straight), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = straight / "out" / "run"
    found = nodes(run_dir)
    assert found["1"]["parent"] == found["2"]["parent"] == "initial"
    merged = found["3"]
    assert merged["parents"] == [merged["parent"], {"1": "2", "2": "1"}[merged["parent"]]]
    other = merged["parents"][1]
    # Its meta agent was told of the merge and read the second parent's code through the read-only mount.
    told = f"from another line of the search, is at /other_parent (read-only; node {other}"
    last_run = [c for c in meta_calls if told in " ".join(str(m["content"]) for m in c["messages"][:2])]
    assert last_run
    tool_result = str(last_run[-1]["messages"][-1]["content"])
    assert "task_agent.py" in tool_result  # `ls /other_parent/task_agent` listed the second parent's files
    partner = [e for e in events(run_dir) if e["event"] == "merge_partner"]
    assert [(e["generation"], e["partner"]) for e in partner] == [(3, other)]
    report = (run_dir / "report.html").read_text()
    assert report.count('class="edge merge"') == 1 and "merge" in report

    killed = tmp_path / "killed"
    respond, _ = graders(SCRIPT)
    fake_openai.set_responder(respond)
    start_and_kill_when(killed, fake_openai, merge_args(killed),
                        lambda d: any(e["event"] == "gen_start" and e.get("generation") == 3 for e in events(d)))
    r = run_cli("run_optimization", "--resume_from", str(killed / "out" / "run"), env=cli_env(fake_openai),
                timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert nodes(killed / "out" / "run")["3"]["parents"] == merged["parents"]
