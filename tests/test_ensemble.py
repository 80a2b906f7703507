"""apps.ensemble on a run whose members' answers are chosen here: every rule's predictions and scores
are known by hand. (The ensemble of a run the real loop made, paying no call: tests/test_experiments.py.)"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from apps.ensemble import main
from archive.records import Node, RunRecord
from domains.metrics import LABELS, normalize_label
from domains.registry import get_domain
from services.errors import UserError
from services.fsutil import atomic_write_csv, atomic_write_json
from support.cli import run_cli

D = "imo_grading"
VAL = get_domain(D).load("val").head(8)
TRUTH = [normalize_label(x) for x in VAL["Reward"]]
# Per val row, each member's answer: "T" the true label, or the k-th wrong label.
ANSWERS = {  # member: rows 0..6 (all three answer them) and row 7 (only m1 and m2)
    "1": ["T", "T", 0, 0, "T", 0, "T", "T"],
    "2": ["T", 0, "T", 1, 0, "T", 0, "T"],
    "3": ["T", 0, "T", "T", 1, 1, 0],
}
SELECTION = {"1": 0.9, "2": 0.4, "3": 0.3}  # members' val scores: the order they rank in, and their weights


def label(row: int, answer) -> str:
    if answer == "T":
        return TRUTH[row]
    return [x for x in LABELS if x != TRUTH[row]][answer]


def key(n: int, split: str = "val") -> str:
    return f"{n:02d}{'a' if split == 'val' else 'b'}" + "0" * 21


@pytest.fixture
def run(tmp_path):
    """Three members' val predictions; member 3 is the one that grades problem P (row 3's) right in train."""
    run = tmp_path / "run"
    atomic_write_json(run / "run.json", RunRecord([D], {"loop": {"seed": 0}}, "bwrap").to_dict())
    train = get_domain(D).load("train")
    problem = VAL["Problem ID"].iloc[3]
    for g, (node_id, answers) in enumerate(ANSWERS.items(), 1):
        rows = VAL.head(len(answers)).copy()
        rows["prediction"] = [f"  {label(i, a).upper()}\n" for i, a in enumerate(answers)]  # as agents answer
        atomic_write_csv(run / "evals" / key(g) / "predictions.csv", rows)
        train_rows = {q: (1.0 if p == problem else 0.0) if node_id == "3" else 0.5
                      for q, p in zip(train["Grading ID"], train["Problem ID"])}
        atomic_write_json(run / "evals" / key(g, "train") / "report.json",
                          {"schema_version": 2, "overall_accuracy": 0.5, "row_scores": train_rows})
        node = Node(node_id, "initial", g, scores={D: {"train": 0.5, "val": SELECTION[node_id]}},
                    samples={D: {"train": 100, "val": 100}}, full_eval={D: True},
                    eval_keys={D: {"train": key(g, "train"), "val": key(g)}})
        atomic_write_json(run / "nodes" / node_id / "node.json", node.to_dict())
    initial = Node("initial", None, 0, scores={D: {"train": 0.1, "val": 0.1}}, samples={D: {"train": 100, "val": 100}},
                   full_eval={D: True})  # no stored predictions: never a member
    atomic_write_json(run / "nodes" / "initial" / "node.json", initial.to_dict())
    return run


def correct(predictions: list[str]) -> list[bool]:
    return [normalize_label(p) == t for p, t in zip(predictions, TRUTH)]


@pytest.mark.parametrize("rule, rows_right", [
    # Row 1: two low-ranked members outvote member 1 (majority wrong), but not by weight (0.7 < 0.9).
    # Row 2: the other way round. Rows 3 and 5: three-way ties go to member 1, wrong. Row 4: member 1, right.
    ("majority", [True, False, True, False, True, False, False]),
    ("weighted", [True, True, False, False, True, False, True]),
])
def test_votes_give_the_hand_counted_answers(run, rule, rows_right, capsys):
    main([str(run), "--split", "val", "--rule", rule, "--top", "3"])
    folder = run / "ensembles" / f"val-{rule}-top3"
    made = pd.read_csv(folder / "predictions.csv", dtype=str, keep_default_na=False)
    assert list(made["Grading ID"]) == list(VAL["Grading ID"].head(7))  # row 7: not every member answered it
    assert correct(list(made["prediction"])) == rows_right
    report = json.loads((folder / "report.json").read_text())
    assert report["overall_accuracy"] == pytest.approx(sum(rows_right) / 7)
    members = json.loads((folder / "members.json").read_text())
    assert [m["node"] for m in members["members"]] == ["1", "2", "3"]
    assert [m["score"] for m in members["members"]] == pytest.approx([4 / 7, 3 / 7, 3 / 7])
    assert members["rows"] == 7 and members["vs_best"]["node"] == "1"
    assert members["vs_best"]["gain"] == pytest.approx(sum(rows_right) / 7 - 4 / 7)
    out = capsys.readouterr().out
    assert f"on the 7 rows of {D}/val every member answered (no model call)" in out
    assert "node 1      overall_accuracy 0.571" in out


def test_best_per_question_asks_the_member_best_at_that_problem(run):
    main([str(run), "--rule", "best_per_question", "--top", "3"])
    made = pd.read_csv(run / "ensembles" / "val-best_per_question-top3" / "predictions.csv", dtype=str,
                       keep_default_na=False)
    problem = VAL["Problem ID"].iloc[3]
    # Member 3 for rows of its problem (1.0 in train there, 0.5 for the others), else member 1 (0.5 ties: the
    # better ranked).
    expected = [label(i, ANSWERS["3" if VAL["Problem ID"].iloc[i] == problem else "1"][i]) for i in range(7)]
    assert [normalize_label(p) for p in made["prediction"]] == expected
    assert normalize_label(made["prediction"].iloc[3]) == TRUTH[3]  # member 1 was wrong there


def test_top_keeps_the_best_members(run):
    main([str(run), "--top", "2"])
    members = json.loads((run / "ensembles" / "val-majority-top2" / "members.json").read_text())
    assert [m["node"] for m in members["members"]] == ["1", "2"] and members["rows"] == 8


def test_a_planted_link_or_huge_file_is_not_read(run, tmp_path, capsys):
    secret = tmp_path / "secret.csv"
    secret.write_text("Grading ID,prediction\nGB-0477,correct\n")
    target = run / "evals" / key(2) / "predictions.csv"
    target.unlink()
    os.symlink(secret, target)
    with open(run / "evals" / key(3) / "predictions.csv", "ab") as f:
        f.truncate(65 * 2**20)
    main([str(run), "--top", "3"])
    out = capsys.readouterr().out
    assert "node 2 left out: its predictions are not a file the run wrote" in out
    assert "node 3 left out" in out and "over" in out
    members = json.loads((run / "ensembles" / "val-majority-top3" / "members.json").read_text())
    assert [m["node"] for m in members["members"]] == ["1"]


AGENT_ENSEMBLE = """
import sys
def ensemble(rows, members):
    print("notes of the agent, not its answer", file=sys.stderr)
    assert [m["node_id"] for m in members] == ["1", "2", "3"] and all("label" not in r for r in rows)
    chosen = {r["id"]: r["answers"]["3"] for r in rows}
    chosen[rows[0]["id"]] = 7          # not a prediction: the best member's answer is kept
    del chosen[rows[1]["id"]]          # left out: the best member's answer
    return chosen
"""


def give_node_code(run, node_id: str, code: str) -> None:
    from services.workspace import RunRepo

    repo = RunRepo.create(run / "repo", run)  # an empty tree: the node's commit holds only its ensemble.py
    commit = repo.commit_files({"ensemble.py": (False, code.encode())}, None, node_id, "test")
    record = json.loads((run / "nodes" / node_id / "node.json").read_text())
    atomic_write_json(run / "nodes" / node_id / "node.json", {**record, "commit": commit})


def test_a_node_s_own_ensemble_py_combines_in_the_sandbox(run, capsys):
    give_node_code(run, "1", AGENT_ENSEMBLE)
    main([str(run), "--rule", "agent", "--top", "3"])
    assert "node 1's ensemble.py chose 5 of 7 rows (the others: the best member's answer)" in capsys.readouterr().out
    made = pd.read_csv(run / "ensembles" / "val-agent-top3-node1" / "predictions.csv", dtype=str,
                       keep_default_na=False)
    expected = [label(i, ANSWERS["1" if i < 2 else "3"][i]) for i in range(7)]
    assert [normalize_label(p) for p in made["prediction"]] == expected


def test_a_failing_ensemble_py_is_one_line(run):
    give_node_code(run, "1", "def ensemble(rows, members):\n    raise RuntimeError('no')\n")
    with pytest.raises(UserError, match="node 1's ensemble.py failed .*RuntimeError: no"):
        main([str(run), "--rule", "agent", "--top", "3"])
    give_node_code(run, "2", "def ensemble(rows, members):\n    print('[1, 2]')\n    return None\n")
    with pytest.raises(UserError, match="node 2's ensemble.py printed no mapping"):
        main([str(run), "--rule", "agent", "--agent", "2"])
    give_node_code(run, "2", "def ensemble(rows, members):\n    print('[' * 200000)\n    return None\n")
    with pytest.raises(UserError, match="node 2's ensemble.py printed no mapping"):  # nested past recursion
        main([str(run), "--rule", "agent", "--agent", "2"])


def test_an_oversized_answer_of_ensemble_py_is_not_kept(run, capsys):
    give_node_code(run, "2", "def ensemble(rows, members):\n"
                             "    return {r['id']: ('almost' * 10**6 if i == 0 else r['answers']['1'])\n"
                             "            for i, r in enumerate(rows)}\n")  # 6 MB for row 0: over the 1 MB cap
    main([str(run), "--rule", "agent", "--top", "3", "--agent", "2"])
    assert "node 2's ensemble.py chose 6 of 7 rows" in capsys.readouterr().out
    made = pd.read_csv(run / "ensembles" / "val-agent-top3-node2" / "predictions.csv", dtype=str,
                       keep_default_na=False)
    assert [normalize_label(p) for p in made["prediction"]] == [label(i, ANSWERS["1"][i]) for i in range(7)]


@pytest.mark.parametrize("name, record, message", [
    ("final_test.json", {"schema_version": 1, "chosen_on": "val", "best": "1", "nodes": {"1": {D: {
        "score": 1.0, "rows": 8, "interval": None, "key": "../../../etc"}}}}, "not a final test record"),
    ("evaluations.json", {"schema_version": 1, "nodes": {"1": {D: {"test": {
        "score": 1.0, "rows": 8, "interval": None, "key": "/etc/passwd"}}}}}, "not a record of evaluations"),
    ("evaluations.json", {"schema_version": 1, "nodes": {"1": {D: {"test": [1]}}}}, "not a record of evaluations"),
])
def test_a_forged_record_of_test_scores_is_refused_not_followed(run, name, record, message):
    atomic_write_json(run / name, record)
    with pytest.raises(UserError, match=message):
        main([str(run), "--split", "test"])


@pytest.mark.parametrize("args, message", [
    (["{run}", "--split", "dev"], "--split dev: imo_grading has splits"),
    (["{run}", "--top", "0"], "--top 0: expected 1 or more members"),
    (["{run}", "--split", "test"], "no node has stored predictions for imo_grading/test"),
    (["{run}", "--domain", "imo_proof"], "--domain imo_proof: the run's domains are imo_grading"),
    (["{tmp}"], "not a run folder (no run.json)"),
])
def test_bad_input_is_one_line(run, tmp_path, args, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        main([a.format(run=run, tmp=tmp_path) for a in args])


@pytest.mark.e2e
def test_command_exit_codes(run, tmp_path):
    r = run_cli("apps.ensemble", str(run), "--rule", "weighted", "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "gain over the best member (node 1): +0.000" in r.stdout
    r = run_cli("apps.ensemble", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
