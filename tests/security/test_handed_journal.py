"""The journal of a handed evaluation (RUN/evals/KEY/predictions.jsonl, a harness folder's
predictions.jsonl) is a stranger's file: `--evaluate` seeds a full evaluation from a screen's
journal, a resume reads it back. A link is never followed (the host file it names would be copied
into the run and shown as predictions), a fifo never waited on, and a huge or garbled journal is
read in bounded memory, line by line."""

import json
import os
import subprocess
import sys
import time

import pytest

from archive.eval_store import EvalStore
from domains.harness import journal as journal_module
from domains.harness.journal import Journal
from services.errors import UserError
from support.cli import REPO_ROOT, cli_env

SECRET = "the user's private key\n"


def planted(kind: str, path, victim) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link":
        os.symlink(victim, path)
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["link", "fifo"])
@pytest.mark.attack("a handed evaluation whose screen journal is a link to a file of the user, or a fifo: "
                    "--evaluate seeds the full evaluation from it")
def test_a_planted_screen_journal_is_never_copied_or_waited_on(tmp_path, kind):
    victim = tmp_path / "id_ed25519"
    victim.write_text(SECRET)
    store = EvalStore(tmp_path / "run")
    screen, full = "a" * 24, "b" * 24
    planted(kind, store.folder(screen) / "predictions.jsonl", victim)
    started = time.monotonic()
    with pytest.raises(UserError, match="predictions.jsonl cannot be read as a journal: ") as caught:
        store.seed(full, screen)
    assert time.monotonic() - started < 2
    assert "\n" not in str(caught.value)
    assert not os.path.lexists(store.folder(full) / "predictions.jsonl")
    assert not any(SECRET in p.read_text() for p in store.folder(full).rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", ["link", "fifo"])
@pytest.mark.attack("a handed harness folder whose predictions.jsonl is a link to a file of the user, or a fifo, "
                    "resumed with `domains.harness --resume_from`")
def test_a_planted_journal_ends_a_resume_in_one_line(tmp_path, kind, fake_openai_session):
    victim = tmp_path / "notes.jsonl"
    victim.write_text(json.dumps({"id": "1", "prediction": SECRET}) + "\n")
    folder = tmp_path / "handed"
    planted(kind, folder / "predictions.jsonl", victim)
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "domains.harness", "--domain", "imo_grading", "--subset", "train",
                        "--num_samples", "2", "--resume_from", str(folder), "--model", "openai/fake",
                        "--sandbox", "bwrap"],
                       env=cli_env(fake_openai_session), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert "predictions.jsonl cannot be read as a journal: " in r.stderr, r.stderr
    assert not (folder / "predictions.csv").exists() and victim.read_text().count("\n") == 1


@pytest.mark.attack("a handed journal whose lines are garbled, not records, or longer than a record may be "
                    "(read in bounded memory, those lines answered again)")
def test_a_garbled_or_oversized_journal_keeps_only_its_records(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_module, "MAX_LINE", 1000)
    path = tmp_path / "predictions.jsonl"
    lines = [json.dumps({"id": "1", "prediction": "kept"}),
             json.dumps({"id": "2", "prediction": "x" * 5000}),  # over the line bound: answered again
             "[1, 2, 3]", '{"no_id": true}', '{"id": {"a": 1}}', "\xff garbage",
             json.dumps({"id": "3", "prediction": "also kept"}),
             '{"id": "4", "predic']  # cut by a kill
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    records = Journal(path).records
    assert {qid: rec["prediction"] for qid, rec in records.items()} == {"1": "kept", "3": "also kept"}


@pytest.mark.attack("a handed journal over the size a journal may have (a sparse file of terabytes)")
def test_a_journal_over_its_size_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "predictions.jsonl"
    with open(path, "wb") as f:
        f.truncate(2**40)  # a terabyte of holes: reading it whole would never end
    started = time.monotonic()
    with pytest.raises(UserError, match=r"predictions.jsonl cannot be read as a journal: .*over the limit of "):
        Journal(path)
    assert time.monotonic() - started < 1


@pytest.mark.attack("a handed run whose evals/<key> folder is a link to a folder of the user holding a journal, "
                    "seeded by --evaluate (its records were copied into the run and scored)")
def test_a_linked_evaluation_folder_is_never_read_through(tmp_path):
    from services.fsutil import hold_folder, release_folder

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "predictions.jsonl").write_text(json.dumps({"id": "1", "prediction": SECRET}) + "\n")
    run = tmp_path / "run"
    store = EvalStore(run)
    screen, full = "a" * 24, "b" * 24
    store.folder(screen).parent.mkdir(parents=True)
    os.symlink(victim, store.folder(screen))
    hold_folder(run, "run")  # as a resume and --evaluate do, before they read
    try:
        with pytest.raises(UserError, match="is a link or not a folder: nothing is read through it"):
            store.seed(full, screen)
        with pytest.raises(UserError, match="is a link or not a folder: nothing is read through it"):
            Journal(store.folder(screen) / "predictions.jsonl")
    finally:
        release_folder(run)
    assert not os.path.lexists(store.folder(full) / "predictions.jsonl")


@pytest.mark.attack("a handed journal whose lines are JSON built to be costly to parse: 20 MB of nested empty "
                    "arrays, half a million fields, 100,000 nested objects, usage of the wrong type")
def test_a_journal_of_costly_json_is_read_fast_and_keeps_only_record_fields(tmp_path):
    path = tmp_path / "predictions.jsonl"
    lines = [b'{"id":"1","x":[' + b"[]," * 2_000_000 + b"[]]}",
             b'{"id":"2",' + b",".join(b'"k%d":1' % i for i in range(500_000)) + b"}",
             b'{"id":"3","usage":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}",
             json.dumps({"id": "4", "prediction": "kept", "usage": "x", "seconds": "slow", "extra": 1}).encode(),
             json.dumps({"id": "5", "prediction": "also", "usage": {"calls": 2, "cost_usd": "free"}}).encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    started = time.monotonic()
    records = Journal(path, max_prediction_bytes=2_000_000).records
    assert time.monotonic() - started < 2
    assert records == {"4": {"id": "4", "prediction": "kept"},
                       "5": {"id": "5", "prediction": "also", "usage": {"calls": 2}}}
