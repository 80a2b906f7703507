"""loop.feedback paper copies agent-written transcripts into the next meta agent's feedback folder.

A task agent writes its row transcripts and the meta agent its own in folders of their sandboxes
(`untrusted/<node>/`), any size, any bytes, links and fifos included. What is published is found
through the train evaluation's journal only, read without following a link or opening a fifo,
each file cut to the first and last halves of its cap, a node's rows within a cap of their own,
and gateway keys redacted (also one that a cut leaves half of).
"""

import os
import threading
from pathlib import Path

import pytest

from archive.eval_store import EvalStore
from archive.records import DomainEval, Node
from archive.store import META_TRANSCRIPT
from domains.harness.journal import JOURNAL
from domains.registry import get_domain
from optimizer import feedback
from optimizer.feedback import MAX_TRANSCRIPT, publish_feedback

KEY = "a" * 24  # the train evaluation's address under evals/
VAL_KEY = "b" * 24
GRADING = get_domain("imo_grading")
SECRET = "gw-" + "S" * 32  # a gateway key's shape
PAPER = type("Config", (), {"loop": type("Loop", (), {"feedback": "paper"})()})()


def token(n: int) -> str:
    return f"{n:012x}"


def setup(tmp_path: Path, rows: dict[str, bytes | None], ran_by: str = "1", node_id: str = "1") -> tuple[Path, Node]:
    """A run whose node `node_id` has a train evaluation of `rows` (row id -> its transcript, None: none),
    answered by the worker of node `ran_by`, and a val evaluation with a transcript of its own."""
    run_dir = tmp_path / "run"
    evals = run_dir / "untrusted" / ran_by / "agent_evals"
    evals.mkdir(parents=True)
    journal = run_dir / "evals" / KEY / JOURNAL
    journal.parent.mkdir(parents=True)
    lines = []
    for n, (row_id, text) in enumerate(rows.items()):
        lines.append(f'{{"id": "{row_id}", "token": "{token(n)}", "prediction": "correct"}}')
        if text is not None:
            (evals / f"chat_history_{token(n)}.md").write_bytes(text)
    journal.write_text("\n".join(lines) + "\n")
    (evals / f"chat_history_{token(999)}.md").write_text("VAL-ROW-TRANSCRIPT")  # a val row's, in the same folder
    node = Node(node_id, "initial", 1)
    node.set_evaluations("imo_grading", {"train": DomainEval(0.5, len(rows), KEY), "val": DomainEval(0.5, 1, VAL_KEY)})
    return run_dir, node


def published(run_dir: Path, node: Node) -> Path:
    publish_feedback(run_dir, [GRADING], EvalStore(run_dir), node, PAPER)
    return run_dir / "feedback" / node.node_id


@pytest.mark.attack("a val row's transcript beside the train rows' in the task agent's folder (only the train "
                    "journal's rows are published)")
def test_only_the_train_journals_rows_are_published_by_their_ids(tmp_path):
    run_dir, node = setup(tmp_path, {"GB-1": b"first", "GB-2": b"second", "GB-3": None})
    evals = published(run_dir, node) / "imo_grading" / "agent_evals"
    assert {p.name: p.read_text() for p in evals.iterdir()} == {"chat_history_GB-1.md": "first",
                                                                "chat_history_GB-2.md": "second"}


def test_a_reused_evaluations_transcripts_are_found_in_the_node_that_ran_it(tmp_path):
    run_dir, node = setup(tmp_path, {"GB-1": b"answered by node 3"}, ran_by="3", node_id="7")
    assert (published(run_dir, node) / "imo_grading" / "agent_evals" / "chat_history_GB-1.md").read_text() == \
        "answered by node 3"


@pytest.mark.attack("a row or meta transcript that is a link to a host file, or a fifo, published to the next "
                    "meta agent")
def test_a_link_is_not_followed_and_a_fifo_not_opened(tmp_path):
    host = tmp_path / "host_secret.txt"
    host.write_text("HOST-SECRET")
    run_dir, node = setup(tmp_path, {"GB-1": None, "GB-2": None, "GB-3": b"fine"})
    evals = run_dir / "untrusted" / "1" / "agent_evals"
    os.symlink(host, evals / f"chat_history_{token(0)}.md")
    os.mkfifo(evals / f"chat_history_{token(1)}.md")
    meta = run_dir / "untrusted" / "1" / "meta"
    meta.mkdir()
    os.symlink(host, meta / META_TRANSCRIPT)
    done = threading.Thread(target=published, args=(run_dir, node), daemon=True)
    done.start()
    done.join(30)
    assert not done.is_alive(), "publishing waited on a fifo"
    folder = run_dir / "feedback" / "1"
    assert [p.name for p in (folder / "imo_grading" / "agent_evals").iterdir()] == ["chat_history_GB-3.md"]
    assert not (folder / "meta_chat_history.md").exists()
    assert "HOST-SECRET" not in "".join(p.read_text() for p in folder.rglob("*") if p.is_file())


@pytest.mark.attack("a task agent's transcript folder that is a link to a host folder")
def test_a_linked_transcript_folder_is_not_followed(tmp_path):
    run_dir, node = setup(tmp_path, {"GB-1": None})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"chat_history_{token(0)}.md").write_text("THROUGH-A-LINK")
    evals = run_dir / "untrusted" / "1" / "agent_evals"
    for f in evals.iterdir():
        f.unlink()
    evals.rmdir()
    os.symlink(elsewhere, evals)
    assert not (published(run_dir, node) / "imo_grading" / "agent_evals").exists()


@pytest.mark.attack("a gigabyte transcript, and a gateway key in a transcript that the cap cuts in half")
def test_a_huge_transcript_keeps_its_ends_and_keys_are_redacted_also_when_cut(tmp_path):
    half = MAX_TRANSCRIPT // 2
    cut_key = b"x" * (half - 52) + SECRET.encode()  # after 42 bytes: the head's cut falls inside the key
    huge = b"START " + SECRET.encode() + b" " + cut_key + b"y" * (4 * MAX_TRANSCRIPT) + b" " + SECRET.encode() + b" END"
    run_dir, node = setup(tmp_path, {"GB-1": huge})
    meta = run_dir / "untrusted" / "1" / "meta"
    meta.mkdir()
    (meta / META_TRANSCRIPT).write_text(f"meta transcript with {SECRET}")
    folder = published(run_dir, node)
    text = (folder / "imo_grading" / "agent_evals" / "chat_history_GB-1.md").read_text()
    assert text.startswith("START gw-[redacted] ") and text.endswith(" gw-[redacted] END")
    assert "the middle is left out" in text and len(text.encode()) < MAX_TRANSCRIPT + 500
    assert "gw-SSS" not in text and "gw-[redacted]\n\n[..." in text  # the cut key's start is redacted too
    assert (folder / "meta_chat_history.md").read_text() == "meta transcript with gw-[redacted]"


@pytest.mark.attack("thousands of row transcripts, to fill the feedback folder every later sandbox reads")
def test_a_nodes_transcripts_stop_at_their_cap_and_the_rest_are_listed(tmp_path, monkeypatch):
    monkeypatch.setattr(feedback, "MAX_ROW_TRANSCRIPTS", 2500)
    run_dir, node = setup(tmp_path, {f"GB-{n}": b"z" * 1000 for n in range(5)})
    evals = published(run_dir, node) / "imo_grading" / "agent_evals"
    kept = sorted(p.name for p in evals.glob("chat_history_*"))
    assert kept == ["chat_history_GB-0.md", "chat_history_GB-1.md"]
    assert (evals / "LEFT_OUT.txt").read_text().splitlines()[1:] == ["GB-2", "GB-3", "GB-4"]


@pytest.mark.attack("a journal whose row token is a path (../../../host) or not a token")
@pytest.mark.parametrize("bad", ["../../../host", "0123456789AB", "", "x" * 12])
def test_a_token_that_is_not_one_names_no_file(tmp_path, bad):
    run_dir, node = setup(tmp_path, {"GB-1": b"ok"})
    journal = run_dir / "evals" / KEY / JOURNAL
    journal.write_text(journal.read_text() + f'{{"id": "GB-1", "token": "{bad}", "prediction": "x"}}\n')
    assert not (published(run_dir, node) / "imo_grading" / "agent_evals").exists()
