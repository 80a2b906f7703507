"""loop.feedback paper: earlier generations' transcripts and logs in the meta agent's feedback folder.

The reference's meta agent can read, of every earlier generation, the task agent's transcript of
each train row, the meta agent's own transcript and the generation's log (generate_loop.py copies
its output folder, val and test evaluations pruned). Two real runs of the loop (the fake provider
plays both models, tests/support/scripted_loop.py): under `paper` the files are in `feedback/`, the
next meta agent lists and reads them inside its sandbox, and no val row is among them; under the
default they are absent.
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from domains.registry import get_domain
from services.config import PROJECT_ROOT
from support.cli import run_loop
from support.scripted_loop import IMPROVE, MARKER, loop_config, nodes, responder

pytestmark = pytest.mark.e2e  # whole runs of the loop

DATA = PROJECT_ROOT / "domains" / "imo" / "data"
SPLITS = {s: pd.read_csv(DATA / f"gradingbench_filtered_100_{s}.csv", dtype=str) for s in ("train", "val", "test")}
LOOK = {"tool_name": "bash", "tool_input": {
    "command": "cd /feedback && ls -R . && grep -o 'GRADE-CAREFULLY-[0-9]' 1/meta_chat_history.md | head -1 "
               "&& grep 'imo_grading val' 1/generation.log"}}
SCRIPT = {1: [IMPROVE], 2: [LOOK]}
GRADING = get_domain("imo_grading")


def run(tmp_path: Path, fake, mode: str | None) -> Path:
    """Two generations of the loop under loop.feedback `mode` (None: the default); the run's folder."""
    fake.set_responder(responder(SCRIPT, []))
    config = loop_config(tmp_path)
    args = ["--max_generation", "2", "--parent_selection", "latest"]
    extra = [] if mode is None else ["--set", f"loop.feedback={mode}"]
    r = run_loop(tmp_path, fake, *args, *extra, config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "out" / "run"


def every_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_under_paper_the_meta_agent_reads_transcripts_and_logs_of_train_rows_only(tmp_path, fake_openai):
    run_dir = run(tmp_path, fake_openai, "paper")
    found = nodes(run_dir)
    assert found["1"]["status"] == "ok" and found["1"]["full_eval"] == {"imo_grading": True}
    feedback = run_dir / "feedback"
    train_ids = set(SPLITS["train"]["Grading ID"][:20])  # loop_config's 20 rows a split
    for node in ("initial", "1"):
        evals = feedback / node / "imo_grading" / "agent_evals"
        assert {p.name for p in evals.iterdir()} == {f"chat_history_{i}.md" for i in train_ids}
        row = SPLITS["train"].iloc[0]
        assert row["Response"].strip()[:200] in (evals / f"chat_history_{row['Grading ID']}.md").read_text()
        log = (feedback / node / "generation.log").read_text()
        assert f"imo_grading train: {found[node]['scores']['imo_grading']['train']:.3f}" in log
        assert f"imo_grading val: {found[node]['scores']['imo_grading']['val']:.3f}" in log  # a score, as there
        # and the val report's figures as the domain prints them (per label, MAE), as the reference's log has
        val_report = json.loads((run_dir / "evals" / found[node]["eval_keys"]["imo_grading"]["val"]
                                 / "report.json").read_text())
        assert f"--- imo_grading val report ---\n{GRADING.format_report(val_report).rstrip()}" in log
    assert not (feedback / "initial" / "meta_chat_history.md").exists()  # the initial node had no meta agent
    assert MARKER in (feedback / "1" / "meta_chat_history.md").read_text()  # generation 1's edit, as it made it
    assert "hyperagents-meta-summary" in (feedback / "1" / "generation.log").read_text()  # what its run printed
    # No val or test row reached the feedback: neither an id nor a student's answer.
    published = every_text(feedback)
    for split in ("val", "test"):
        rows = SPLITS[split]
        assert not [i for i in rows["Grading ID"] if i in published]
        assert not [a for a in rows["Response"] if a.strip() in published]  # (some share a train one's opening)
    # Generation 2's meta agent, in its sandbox, listed and read them.
    seen = (run_dir / "untrusted" / "2" / "meta" / "meta_chat_history.md").read_text()
    assert "chat_history_GB-" in seen and "generation.log" in seen and MARKER in seen
    assert f"imo_grading val: {found['1']['scores']['imo_grading']['val']:.3f}" in seen


def test_by_default_the_feedback_has_no_transcripts_or_logs(tmp_path, fake_openai):
    run_dir = run(tmp_path, fake_openai, None)
    feedback = run_dir / "feedback"
    assert (feedback / "1" / "imo_grading" / "predictions.csv").exists()
    names = {p.name for p in feedback.rglob("*")}
    assert not names & {"agent_evals", "meta_chat_history.md", "generation.log"}
    assert not [n for n in names if n.startswith("chat_history_")]
    assert (run_dir / "untrusted" / "initial" / "agent_evals").is_dir()  # they were written, and not published
