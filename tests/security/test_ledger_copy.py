"""A handed run folder whose ledger.sqlite-wal has no -shm beside it: services.sqlite_files.readable copies both
to a private folder and reads the copy. The copy is a stranger's file read by the dashboard on each page and by
load_run: it must cost bounded memory (a chunk at a time), nothing for a hole, at most MAX_COPY bytes of data, and
fit the reader's READ_SECONDS with the query; each refusal is one line naming the file."""

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

import services.ledger
import services.sqlite_files
from services.ledger import Call, Ledger, LedgerReader, NotALedger
from services.sqlite_files import readable
from support.cli import REPO_ROOT

CALLS = 20  # calls booked in the handed ledger: its -wal holds them, its database file does not

# Reads the ledger named by argv[1] and prints what it read, how long that took and the process's own peak
# RSS: VmHWM, not getrusage's ru_maxrss, which exec carries over from the spawning pytest worker.
PROBE = """
import json, re, sys, time
from services.ledger import LedgerReader, NotALedger
started = time.monotonic()
try:
    out = {"spend": LedgerReader(sys.argv[1]).spend()}
except NotALedger as e:
    out = {"refused": str(e)}
out["seconds"] = time.monotonic() - started
out["peak_mb"] = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) / 1024
print(json.dumps(out))
"""


def handed_ledger(tmp_path):
    """A ledger's files copied while its run was writing (its -wal holds the calls) without the -shm."""
    live = tmp_path / "live"
    ledger = Ledger(live / "ledger.sqlite")
    for i in range(CALLS):
        ledger.record(Call("handed", "1", f"role{i % 2}", "m", 10, 5, 0.25))
    handed = tmp_path / "handed"
    handed.mkdir()
    for name in ("ledger.sqlite", "ledger.sqlite-wal"):
        shutil.copyfile(live / name, handed / name)
    ledger.close()
    assert not (handed / "ledger.sqlite-shm").exists()
    return handed / "ledger.sqlite"


def booked(spend: list[dict]) -> tuple[int, float]:
    return sum(row["calls"] for row in spend), sum(row["cost_usd"] for row in spend)


def listing(folder) -> dict:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def one_line_refusal(path, expected: str) -> str:
    with pytest.raises(NotALedger) as e:
        LedgerReader(path).spend()
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: not a ledger this project wrote: "), message
    assert expected in message, message
    return message


def in_a_thread(call, seconds: float = 5.0) -> BaseException | None:
    """What `call` raised, failing the test if it has not returned within `seconds` (it blocked)."""
    outcome: dict = {}

    def run():
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            outcome["raised"] = e
        outcome["done"] = True

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome.get("done"), f"still blocked after {seconds} s"
    return outcome.get("raised")


def copy_of_wal(path) -> os.stat_result:
    """The private copy of `path`'s -wal that readable makes, as it is when SQLite is handed it."""
    with readable(path) as uri:
        assert uri.startswith("file://") and "?" not in uri  # the copy, not the handed files
        return os.stat(uri.removeprefix("file://") + "-wal")


def test_an_ordinary_wal_without_its_shm_is_read_through_the_copy(tmp_path):
    path = handed_ledger(tmp_path)
    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)  # the database file alone: its -wal skipped
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    db.close()
    assert "calls" not in tables, tables  # so the calls below can only come from the copied -wal
    before = listing(path.parent)
    assert booked(LedgerReader(path).spend()) == (CALLS, CALLS * 0.25)
    assert LedgerReader(path).tables() == {"calls", "refusals", "cache"}
    assert listing(path.parent) == before  # nothing written beside it, no -shm made


@pytest.mark.attack("a handed ledger.sqlite-wal with no -shm that is a 1 GiB sparse file (each dashboard page and "
                    "load_run read a gigabyte into memory to copy it, past the reader's 3 s deadline)")
def test_a_sparse_gigabyte_wal_costs_neither_time_nor_memory(tmp_path):
    path = handed_ledger(tmp_path)
    wal = tmp_path / "handed" / "ledger.sqlite-wal"
    os.truncate(wal, 2**30)  # its real frames, then a hole to a gigabyte
    sparse = os.stat(wal).st_blocks * 512 < 2**20  # every file system of a Linux temp folder makes holes
    r = subprocess.run([sys.executable, "-c", PROBE, str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    print(f"sparse 1 GiB -wal: read in {out['seconds']:.3f} s, peak RSS {out['peak_mb']:.0f} MB")
    assert out["seconds"] < 1.5 and out["peak_mb"] < 200, out
    if sparse:
        assert booked(out["spend"]) == (CALLS, CALLS * 0.25), out
        copied = copy_of_wal(path)
        assert copied.st_size == 2**30 and copied.st_blocks * 512 < 16 * 2**20  # its hole, still a hole
    else:
        assert "ledger.sqlite-wal: over 256 MiB of data to copy" in out["refused"], out


@pytest.mark.attack("a handed ledger.sqlite-wal with no -shm holding more data than a ledger's (the copy the "
                    "readers make of it would fill the temp folder)")
def test_a_wal_with_more_data_than_the_cap_is_refused(tmp_path, monkeypatch):
    path = handed_ledger(tmp_path)
    with open(path.parent / "ledger.sqlite-wal", "ab") as f:
        f.write(os.urandom(3 * 2**20))  # data, not a hole
    monkeypatch.setattr(services.sqlite_files, "MAX_COPY", 2**20)
    started = time.monotonic()
    one_line_refusal(path, "ledger.sqlite-wal: over 1 MiB of data to copy")
    assert time.monotonic() - started < 3
    (path.parent / "ledger.sqlite-wal").unlink()
    with open(path, "ab") as f:  # the database itself, counted the same way when a -wal makes it copied
        f.write(os.urandom(2 * 2**20))
    (path.parent / "ledger.sqlite-wal").write_bytes(b"")
    one_line_refusal(path, "ledger.sqlite: over 1 MiB of data to copy")


@pytest.mark.attack("a handed ledger.sqlite-wal with no -shm that is a fifo, or a link to a file of the user "
                    "(the copy would block on the fifo, or read the user's file)")
@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_wal_that_is_a_fifo_or_a_link_is_refused_without_blocking(tmp_path, kind):
    path = handed_ledger(tmp_path)
    wal = path.parent / "ledger.sqlite-wal"
    wal.unlink()
    if kind == "fifo":
        os.mkfifo(wal)
    else:
        victim = tmp_path / "user.bin"
        victim.write_bytes(b"the user's own bytes")
        os.symlink(victim, wal)
    raised = in_a_thread(lambda: LedgerReader(path).spend())
    assert isinstance(raised, NotALedger) and "ledger.sqlite-wal is not a regular file" in str(raised), raised
    # readable's own copy refuses it too (the -wal swapped in after the reader's check), without blocking
    raised = in_a_thread(lambda: readable(path).__enter__())
    expected = "ledger.sqlite-wal: not a regular file" if kind == "fifo" else "ledger.sqlite-wal: a link, not followed"
    assert isinstance(raised, OSError) and str(raised) == expected, raised


def test_the_copy_shares_the_readers_deadline(tmp_path, monkeypatch):
    path = handed_ledger(tmp_path)
    with pytest.raises(TimeoutError, match="copying ledger.sqlite ran out of time"):
        with readable(path, time.monotonic() - 1):
            pass
    monkeypatch.setattr(services.ledger, "READ_SECONDS", 0.0)
    one_line_refusal(path, "not read within 0 s (copying ledger.sqlite ran out of time)")


def test_without_seek_data_the_copy_reads_holes_as_data_within_the_cap(tmp_path, monkeypatch):
    real_lseek = os.lseek

    def no_seek_data(fd, offset, whence):
        if whence in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_lseek(fd, offset, whence)

    path = handed_ledger(tmp_path)
    monkeypatch.setattr(os, "lseek", no_seek_data)
    assert booked(LedgerReader(path).spend()) == (CALLS, CALLS * 0.25)
    os.truncate(path.parent / "ledger.sqlite-wal", 2**30)
    monkeypatch.setattr(services.sqlite_files, "MAX_COPY", 8 * 2**20)
    started = time.monotonic()
    one_line_refusal(path, "ledger.sqlite-wal: over 8 MiB of data to copy")
    assert time.monotonic() - started < 3
