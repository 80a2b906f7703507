"""A handed run folder's event log (archive.jsonl), read by Archive.events: what a resume reads to redo
the generations a stop cut short (pending_generations, next_generation, meta_result). A link planted
there must not make it read a file of the user, a fifo must not make it wait for ever, and a log
past its bound must not be read into memory: each ends in one line naming the file, in seconds."""

import os
import subprocess
import sys
import time

import pytest

from archive.run_state import MAX_LOG
from archive.store import Archive
from services.errors import UserError
from support.cli import REPO_ROOT, run_cli
from support.small_runs import write_run

SECONDS = 20  # an interpreter's start and a refusal; a read blocked on a fifo never ends
RESUME_SECONDS = 90  # a resume refuses once its loop starts, after the local model's server (7 s here, 30 loaded)

# The reader a resume runs, through the API and the command line's one-line end.
READ = ("import sys\n"
        "from archive.store import Archive\n"
        "from services.errors import exit_on_user_error\n"
        "print(exit_on_user_error(lambda: Archive(sys.argv[1]).pending_generations()))\n")


def api_reader(run):
    """Archive(run).pending_generations() in a process of its own (a hang is a failure, not a stuck suite)."""
    started = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", READ, str(run)], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=SECONDS, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the event log of {run} did not end in {SECONDS} s")
    return r, time.monotonic() - started


def one_line(r, *expected: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def handed(tmp_path, name="handed"):
    return write_run(tmp_path / name, 0, [0.5, 0.6])


@pytest.mark.attack("a handed run whose archive.jsonl is a link to a file of the user (its lines read as the run's "
                    "events) or a fifo (the reader waits for ever)")
def test_a_linked_or_fifo_event_log_ends_in_one_line(tmp_path):
    victim = tmp_path / "notes.jsonl"  # a JSON-lines file of the user's: read through, it would be the run's events
    victim.write_text('{"event": "gen_start", "node_id": "secret", "parent": "initial", "generation": 9}\n')
    linked = handed(tmp_path, "linked")
    os.symlink(victim, linked / "archive.jsonl")
    fifo = handed(tmp_path, "fifo")
    os.mkfifo(fifo / "archive.jsonl")
    for run, why in ((linked, "a link, which is never read through"), (fifo, "not a regular file (a fifo)")):
        r, seconds = api_reader(run)
        one_line(r, f"error: {run / 'archive.jsonl'}: not the run's event log: {why}")
        assert seconds < SECONDS
        started = time.monotonic()
        with pytest.raises(UserError) as e:
            Archive(run).events()
        assert time.monotonic() - started < 1 and "\n" not in str(e.value)
    assert victim.read_text().startswith('{"event": "gen_start", "node_id": "secret"')


@pytest.mark.e2e
def test_a_resume_of_a_linked_or_fifo_event_log_ends_in_one_line(tmp_path):
    victim = tmp_path / "notes.jsonl"
    victim.write_text("{}\n")
    linked = handed(tmp_path, "linked")
    os.symlink(victim, linked / "archive.jsonl")
    fifo = handed(tmp_path, "fifo")
    os.mkfifo(fifo / "archive.jsonl")
    for run in (linked, fifo):
        started = time.monotonic()
        r = run_cli("run_optimization", "--resume_from", str(run), env={**os.environ}, timeout=2 * RESUME_SECONDS)
        line = one_line(r, f"{run / 'archive.jsonl'}")
        # refused by the first that meets it: the loop's first write ("... is a link: nothing is written through
        # it", "... is a fifo") or, where a reader of the run's state comes first, its read ("not the run's event log")
        assert f"{run / 'archive.jsonl'} is a" in line or "archive.jsonl: not the run's event log: " in line, line
        assert time.monotonic() - started < RESUME_SECONDS
    assert victim.read_text() == "{}\n"


@pytest.mark.attack("a handed run whose archive.jsonl is past the event log's bound (a sparse file of 64 MiB and "
                    "a byte), which a resume would read into memory whole")
def test_an_event_log_past_its_bound_ends_in_one_line(tmp_path):
    run = handed(tmp_path)
    with open(run / "archive.jsonl", "wb") as f:
        f.truncate(MAX_LOG + 1)
    r, seconds = api_reader(run)
    one_line(r, f"{run / 'archive.jsonl'}: not the run's event log: {MAX_LOG + 1} bytes, over the limit of "
                f"{MAX_LOG} bytes")
    assert seconds < SECONDS


def test_the_runs_own_event_log_is_read_as_before(tmp_path):
    run = handed(tmp_path)
    assert Archive(run).events() == []  # no log yet
    archive = Archive(run)
    archive.log("gen_start", node_id="2", parent="1", generation=2)
    with open(run / "archive.jsonl", "ab") as f:
        f.write(b'{"event": "cut sh')  # the line a kill cut short
    events = Archive(run).events()
    assert [(e["event"], e["node_id"]) for e in events] == [("gen_start", "2")]
