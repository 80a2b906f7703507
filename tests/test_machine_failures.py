"""A failure of this machine is never the agent's (MachineDown, exit 74): the run stops with one line naming
the cause and the command that continues, records nothing in flight as a node's failure, and a resume
redoes exactly what was interrupted.

The faults are real: a run folder on a small tmpfs that fills, or one remounted read-only, each in a
private mount namespace of the run's own (`unshare -m`, as root; the test reaches the run's view of its
folder through /proc/PID/root); the local model's server killed; the Docker engine stopped. Each
interrupted run is resumed and its archive compared with an uninterrupted run of the same seed, as
tests/test_outage.py does for a provider's outage.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optimizer.launch import resume_command
from optimizer.request import RunRequest
from services.errors import EXIT_MACHINE_DOWN, MachineDown, ProviderDown, machine_failure
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from support.fake_openai import FakeOpenAI
from support.scripted_loop import IMPROVE, responder
from support.waiting import wait_for


def _can_mount() -> str | None:
    """None when this process may mount in a private mount namespace (root, unshare and nsenter), else why not."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        return "needs root with unshare and nsenter"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1M tmpfs /mnt"], capture_output=True,
                           text=True, timeout=30)
    return None if probe.returncode == 0 else f"cannot mount in a private namespace: {probe.stderr.strip()[:200]}"


_WHY_NOT_MOUNT = _can_mount()
needs_mounts = pytest.mark.skipif(_WHY_NOT_MOUNT is not None, reason=str(_WHY_NOT_MOUNT))


# -- what is classed as this machine's --------------------------------------------------------------

@pytest.mark.parametrize("code, cause", [(errno.ENOSPC, "the disk is full"), (errno.EDQUOT, "the disk quota"),
                                         (errno.EROFS, "turned read-only"), (errno.EIO, "I/O error"),
                                         (errno.ESTALE, "stale file handle")])
def test_the_hosts_own_io_errors_are_the_machines(code, cause):
    down = machine_failure(OSError(code, os.strerror(code)), "/run/x/node.json")
    assert isinstance(down, MachineDown) and isinstance(down, ProviderDown) and not isinstance(down, Exception)
    assert cause in down.reason and "/run/x/node.json" in down.reason and os.strerror(code) in down.reason


@pytest.mark.parametrize("error", [OSError(errno.EACCES, "Permission denied"), FileNotFoundError(errno.ENOENT, "x"),
                                   OSError("not a regular file"), ValueError("bad"), sqlite3.IntegrityError("dup")])
def test_other_errors_stay_what_they_are(error):
    assert machine_failure(error, "/x") is None


def test_a_full_sqlite_disk_is_the_machines(tmp_path):
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    down = machine_failure(full, "the ledger x")
    assert down is not None and down.reason == "the disk is full: cannot write the ledger x (database or disk is full)"


def test_a_held_folder_gone_is_the_machines_a_file_planted_below_it_is_not(tmp_path, monkeypatch):
    from services import write_failures
    from services.fsutil import NotWritable, atomic_write_text, make_folder

    run = tmp_path / "run"
    make_folder(run / "untrusted")
    monkeypatch.setattr(write_failures, "_GUARDED", set())
    write_failures.guard_folder(run)
    (run / "untrusted" / "n1").write_text("a file where a folder was")  # what a sandbox may do below the run
    with pytest.raises(NotWritable):
        atomic_write_text(run / "untrusted" / "n1" / "x", "x")
    shutil.rmtree(run)  # the run folder itself is gone
    with pytest.raises(MachineDown) as gone:
        atomic_write_text(run / "nodes" / "n1" / "node.json", "{}")
    assert gone.value.reason.startswith(f"the folder {run} is gone: cannot write {run}/nodes/n1/node.json")
    assert gone.value.folder == run


# -- the host's writes -----------------------------------------------------------------------------

FILL_AND_APPEND = """
import sys
from pathlib import Path
from services.errors import MachineDown
from services.fsutil import atomic_write_text, open_append

disk = Path(sys.argv[1])
atomic_write_text(disk / "record.json", "kept")
line = b"x" * 99 + b"\\n"
with open_append(disk / "journal") as f:
    try:
        while True:
            f.write(line)
    except MachineDown as e:
        print(e.reason)
try:
    atomic_write_text(disk / "record.json", "new " * 10000)
except MachineDown as e:
    print(e.reason)
print((disk / "journal").stat().st_size, (disk / "journal").read_bytes()[-1:] == b"\\n",
      (disk / "record.json").read_text())
"""


@needs_mounts
def test_a_full_disk_is_machine_down_and_leaves_no_half_line_and_no_half_record(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    quoted = shlex.quote(str(disk))
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=256k tmpfs {quoted} && "
                        f"{shlex.quote(sys.executable)} -c {shlex.quote(FILL_AND_APPEND)} {quoted}"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    appended, replaced, sizes = r.stdout.strip().splitlines()
    assert appended == f"the disk is full: cannot write {disk}/journal (No space left on device)"
    assert replaced == f"the disk is full: cannot write {disk}/record.json (No space left on device)"
    size, ends_a_line, record = sizes.split(" ", 2)
    assert int(size) % 100 == 0 and int(size) > 100_000 and ends_a_line == "True"  # whole lines only
    assert record == "kept"  # the old record, whole


REPO_ON_A_FULL_DISK = """
import sys
from pathlib import Path
from services.errors import MachineDown
from services.workspace import RunRepo

disk, source = Path(sys.argv[1]), Path(sys.argv[2])
repo = RunRepo.create(disk / "repo", source)
commit = repo.node_commit("initial")
filler = disk / "filler"
try:
    with open(filler, "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError:
    pass
for what, step in (("commit", lambda: repo.commit_files({"big.txt": (False, b"y" * 200_000)}, commit, "1", "m")),
                   ("checkout", lambda: repo.checkout(commit, disk / "ws"))):
    try:
        step()
        print(what, "no failure")
    except MachineDown as e:
        print(what, e.reason)
"""


@needs_mounts
def test_a_repository_or_workspace_the_disk_cannot_hold_is_the_machines(tmp_path):
    disk, source = tmp_path / "disk", tmp_path / "source"
    disk.mkdir()
    (source / "task_agent").mkdir(parents=True)
    (source / "task_agent" / "__init__.py").write_text("x = 1\n" * 2000)
    quoted = shlex.quote(str(disk))
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=2m tmpfs {quoted} && "
                        f"{shlex.quote(sys.executable)} -c {shlex.quote(REPO_ON_A_FULL_DISK)} {quoted} "
                        f"{shlex.quote(str(source))}"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    committed, checked_out = r.stdout.strip().splitlines()
    assert committed == f"commit the file system of {disk}/repo is full", committed
    assert checked_out.startswith(f"checkout the disk is full: cannot write {disk}/ws"), checked_out


def test_a_journal_whose_last_line_a_kill_cut_starts_its_next_record_on_a_line_of_its_own(tmp_path):
    from domains.harness.journal import Journal, read_journal

    path = tmp_path / "predictions.jsonl"
    path.write_text('{"id": "a", "prediction": "1"}\n{"id": "b", "predic')
    journal = Journal(path)
    journal.append({"id": "c", "prediction": "3"})
    journal.close()
    assert [r["id"] for r in read_journal(path)] == ["a", "c"]  # b is answered again; c is kept


# -- the gateway ------------------------------------------------------------------------------------

def test_the_gateways_socket_removed_stops_every_call_as_the_machines_failure(gateway_factory):
    gw = gateway_factory()
    key = gw.new_session("n", "task", ["openai/fake"])
    body = {"model": "openai/fake", "messages": [{"role": "user", "content": "hi"}]}
    assert gw.handle_chat(key, body).status == 200
    gw.check_breaker()
    os.unlink(gw.unix_socket)  # a cleaner of the temp folder: every sandbox connects by that name
    with pytest.raises(MachineDown) as stopped:
        gw.check_breaker()
    assert stopped.value.reason == f"the gateway's socket {gw.unix_socket} is gone (No such file or directory)"
    reply = gw.handle_chat(key, body)
    assert reply.status == 503 and reply.body["error"]["type"] == "provider_down"
    assert gw.provider_failures(key) == 1  # so a row answered meanwhile is run again, not kept


def test_a_ledger_the_disk_cannot_write_answers_no_call_and_stops_the_run(gateway_factory, monkeypatch):
    gw = gateway_factory()
    key = gw.new_session("n", "task", ["openai/fake"])

    def full(call):
        error = sqlite3.OperationalError("database or disk is full")
        error.sqlite_errorcode = sqlite3.SQLITE_FULL
        raise error

    monkeypatch.setattr(gw.ledger, "record", full)
    reply = gw.handle_chat(key, {"model": "openai/fake", "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status == 503 and reply.body["error"]["type"] == "provider_down"  # an answer it could not book
    assert gw.provider_failures(key) == 1 and gw.spent().calls == 0
    with pytest.raises(MachineDown) as stopped:
        gw.check_breaker()
    assert stopped.value.reason == (f"the disk is full: cannot write the ledger {gw.ledger.path} "
                                    "(database or disk is full)")


def test_a_dead_local_server_is_the_machines_failure_a_failed_probe_the_providers(tmp_path, fake_openai, monkeypatch):
    from services.config import Config
    from services.gateway import Gateway
    from services.ledger import Ledger

    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = Config()
    config.gateway.max_retries, config.gateway.breaker_failures = 0, 1
    health: dict[str, str | None] = {"openai/fake": None}
    body = {"model": "openai/fake", "messages": [{"role": "user", "content": "hi"}]}
    for dead, stop in ((None, ProviderDown), ("the local model server (openai/fake) exited with SIGKILL", MachineDown)):
        health["openai/fake"] = dead
        gw = Gateway(config, Ledger(tmp_path / f"{stop.__name__}.sqlite"), "run", provider_health=health.get).start()
        try:
            gw.allow_models("openai/fake")
            fake_openai.add_faults(["500", "500"])  # the call, then the probe
            gw.handle_chat(gw.new_session("n", "task", ["openai/fake"]), body)
            with pytest.raises(ProviderDown) as stopped:
                gw.check_breaker()
            assert type(stopped.value) is stop
        finally:
            gw.stop()
            gw.ledger.close()


# -- whole runs ---------------------------------------------------------------------------------------

def loop_config(tmp_path: Path, extra: str = "") -> str:
    """Small evaluations (3 staged train rows, then 6 train and 6 val), bwrap sandboxes."""
    path = tmp_path / "loop.yaml"
    path.write_text(FAST_CONFIG + "loop:\n  eval_samples: 6\n  stages: [[3, 0]]\n  meta_timeout_s: 120\n" + extra)
    return str(path)


def loop_args(out: Path, config: str, *more: str) -> list[str]:
    return ["--domain", "imo_grading", "--output_dir", str(out), "--run_id", "run", "--task_model", "openai/fake",
            "--meta_model", "openai/fake-meta", "--config", config, "--max_generation", "1", "--seed", "7", *more]


def script(meta_calls: list | None = None):
    """Generation 1's meta agent changes the task agent (so its evaluation is paid for), on any run; its
    requests go to `meta_calls`."""
    return responder({0: [IMPROVE]}, [] if meta_calls is None else meta_calls, by_iterations_left=True)


def nodes(run_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "archive.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def finished_rows(run_dir: Path) -> dict[tuple[str, str], dict]:
    """Rows journaled in the evaluations of the run, by (evaluation, row id); a line cut short is skipped, as
    the run skips it."""
    rows = {}
    for path in sorted((run_dir / "evals").glob("*/predictions.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            rows[path.parent.name, rec["id"]] = rec
    return rows


def archive_of(run_dir: Path) -> dict[str, dict]:
    """What a run decided, node by node: what an uninterrupted run of the same seed must decide too (times,
    costs and commit ids aside, which differ between any two runs)."""
    kept = ("status", "parent", "generation", "scores", "samples", "full_eval", "eval_keys", "intervals", "screening",
            "patch", "error", "meta_error", "flags", "meta_model", "parents")
    return {node_id: {k: n.get(k) for k in kept} for node_id, n in nodes(run_dir).items()}


def task_calls_paid(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM calls WHERE role = 'task' AND cache_hit = 0").fetchone()[0]


class NamespacedRun:
    """`python -m run_optimization ARGS` in a mount namespace of its own, where the shell line `setup` mounts
    over `folder` (the run's --output_dir); once the run ended, what it wrote there is copied to `saved`
    (a tmpfs ends with its namespace). `seen(path)` is `path` as the run sees it (/proc/PID/root)."""

    def __init__(self, tmp_path: Path, setup: str, folder: Path, args: list[str], env: dict,
                 saved: Path | None = None) -> None:
        copy = f"cp -a {shlex.quote(str(folder / 'run'))} {shlex.quote(str(saved))}" if saved else "true"
        line = f'{setup} || exit 99; {shlex.quote(sys.executable)} -m run_optimization "$@"; rc=$?; {copy}; exit $rc'
        self.out, self.err = tmp_path / "run.out", tmp_path / "run.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", line, "sh", *args],
                                         cwd=REPO_ROOT, env=env, stdout=out, stderr=err)

    def seen(self, path: Path) -> Path:
        return Path(f"/proc/{self.proc.pid}/root") / path.relative_to("/")

    def in_namespace(self, *argv: str) -> None:
        done = subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", *argv], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr

    def wait(self, timeout: float = 300) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout)
        finally:
            self.proc.kill()
        return code, self.out.read_text(), self.err.read_text()


def fill(path: Path) -> int:
    """Write zeros to `path` until its file system is full; the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    written = 0
    try:
        for size in (2**20, 4096, 1):
            try:
                while True:
                    written += os.write(fd, b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return written


def reference_run(tmp_path: Path, config: str) -> Path:
    """The same run, uninterrupted, on a disk with room."""
    with FakeOpenAI(script()) as server:
        r = run_cli("run_optimization", *loop_args(tmp_path / "ref", config), env=cli_env(server, TQDM_DISABLE="1"),
                    timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "ref" / "run"


def stopped_line(code: int, err: str, run_dir: Path, *flags: str) -> str:
    """The one line a run stopped by this machine ends with, checked: exit 74, the exact command that continues
    (`flags`: those the resume must give again)."""
    assert code == EXIT_MACHINE_DOWN, err[-3000:]
    assert len(err.strip().splitlines()) == 1, err[-3000:]
    line = err.strip()
    assert line.startswith("stopped: "), line
    assert line.endswith("; nothing in flight was recorded; to continue: "
                         + " ".join([resume_command(run_dir, RunRequest()), *flags]).strip()), line
    return line


def journal_lines(run_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (run_dir / "evals").glob("*/predictions.jsonl"))


def resumed(line: str, meta_calls: list | None = None, **env: str) -> subprocess.CompletedProcess:
    """The command the stop's `line` named, run with the provider and the machine back."""
    argv = shlex.split(line.rsplit("; to continue: ", 1)[1])
    assert argv[:3] == ["python", "-m", "run_optimization"] or argv[:3] == [sys.executable, "-m", "run_optimization"]
    with FakeOpenAI(script(meta_calls)) as server:
        return run_cli(*argv[2:], env=cli_env(server, TQDM_DISABLE="1", **env), timeout=600)


@pytest.mark.e2e
@needs_mounts
def test_a_run_folder_whose_disk_fills_stops_the_run_and_a_resume_ends_as_an_uninterrupted_run(tmp_path):
    config = loop_config(tmp_path)
    disk, saved = tmp_path / "disk", tmp_path / "saved"
    disk.mkdir()
    run_dir = disk / "run"
    started = time.monotonic()
    with FakeOpenAI(script(), latency=0.3) as server:
        run = NamespacedRun(tmp_path, f"mount -t tmpfs -o size=64M tmpfs {shlex.quote(str(disk))}", disk,
                            loop_args(disk, config), cli_env(server, TQDM_DISABLE="1"), saved)
        # The disk fills in the middle of the initial node's evaluation, with rows in flight.
        wait_for(lambda: run.proc.poll() is not None or len(finished_rows(run.seen(run_dir))) >= 3, 300, "3 rows")
        filled = fill(run.seen(disk / "filler"))
        code, _, err = run.wait()
    stopped_s = time.monotonic() - started
    line = stopped_line(code, err, run_dir)
    # What met the full disk first: the journal, or the ledger booking a row's call.
    assert line.startswith((f"stopped: the disk is full: cannot write {run_dir}/",
                            f"stopped: the disk is full: cannot write the ledger {run_dir}/ledger.sqlite ")), line
    assert filled > 0
    shutil.move(saved, run_dir)  # the tmpfs is gone with its namespace: its run folder, on a disk with room
    assert nodes(run_dir) == {}  # the node under evaluation is not recorded (no eval_failed)
    assert not any(e["event"] == "node_recorded" for e in events(run_dir))
    before = finished_rows(run_dir)
    assert before and all(not rec["error"] for rec in before.values())

    started = time.monotonic()
    r = resumed(line)
    resumed_s = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    assert {k: v for k, v in finished_rows(run_dir).items() if k in before} == before  # finished rows kept as they were
    reference = reference_run(tmp_path, config)
    assert archive_of(run_dir) == archive_of(reference) and set(archive_of(run_dir)) == {"initial", "1"}
    # Paid again: at most the rows in flight when the disk filled (5 workers and 2 rows sent ahead).
    assert task_calls_paid(reference) <= task_calls_paid(run_dir) <= task_calls_paid(reference) + 7
    print(f"disk full: stopped after {stopped_s:.1f} s, resumed in {resumed_s:.1f} s")


@pytest.mark.e2e
@needs_mounts
def test_a_run_folder_turned_read_only_stops_the_run_and_a_resume_redoes_only_the_evaluation_in_flight(tmp_path):
    config = loop_config(tmp_path)
    disk = tmp_path / "disk"
    disk.mkdir()
    run_dir = disk / "run"
    started = time.monotonic()
    with FakeOpenAI(script(), latency=0.3) as server:
        run = NamespacedRun(tmp_path, "true", disk, loop_args(disk, config), cli_env(server, TQDM_DISABLE="1"))
        # Generation 1's change is committed and its evaluation has 2 rows (15 rows are the initial node's).
        seen = run.seen(run_dir)
        wait_for(lambda: run.proc.poll() is not None or (any(e["event"] == "meta_done" for e in events(seen))
                                                        and journal_lines(seen) >= 17), 300, "node 1's rows")
        # A read-only view of the folder over it (a remount would be refused while the run has files open
        # to write): every file the run opens from now on is read-only, also to root (EROFS).
        run.in_namespace("mount", "--bind", "-o", "ro", str(disk), str(disk))
        code, _, err = run.wait()
    stopped_s = time.monotonic() - started
    line = stopped_line(code, err, run_dir)
    assert line.startswith("stopped: the file system turned read-only: cannot write "), line
    assert "(Read-only file system)" in line or "(attempt to write a readonly database)" in line, line
    found = nodes(run_dir)  # the bind mount went with its namespace: the folder is writable again
    assert set(found) == {"initial"} and found["initial"]["status"] == "ok"  # node 1 is not recorded
    before = finished_rows(run_dir)

    meta_calls: list = []
    started = time.monotonic()
    r = resumed(line, meta_calls)
    resumed_s = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    assert meta_calls == []  # its committed change is kept: only its evaluation is redone
    assert {k: v for k, v in finished_rows(run_dir).items() if k in before} == before
    reference = reference_run(tmp_path, config)
    assert archive_of(run_dir) == archive_of(reference) and set(archive_of(run_dir)) == {"initial", "1"}
    assert task_calls_paid(reference) <= task_calls_paid(run_dir) <= task_calls_paid(reference) + 7
    print(f"read-only: stopped after {stopped_s:.1f} s, resumed in {resumed_s:.1f} s")


@pytest.mark.parametrize("codes, expected", [((74, 0), 74), ((75, 0), 75), ((75, 74), 74), ((1, 0), 2)])
def test_a_group_exits_with_the_code_of_what_stopped_its_replicates(tmp_path, monkeypatch, capsys, codes, expected):
    import run_optimization
    from optimizer import replicates
    from services.errors import exit_on_user_error

    given = iter(codes)
    monkeypatch.setattr(replicates, "_replicate", lambda name, argv: next(given))
    parser = run_optimization.build_parser()
    args = parser.parse_args(["--domain", "imo_grading", "--replicates", "2", "--output_dir", str(tmp_path),
                              "--run_id", "g"])
    with pytest.raises(SystemExit) as stopped:
        exit_on_user_error(lambda: run_optimization.run_replicates(parser, args))
    assert stopped.value.code == expected
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    if expected != 2:
        cause = "a failure of this machine" if expected == 74 else "a provider's outage"
        assert f"stopped by {cause}" in err[0]
        assert err[0].endswith(f"continue with python -m run_optimization --resume_from {tmp_path / 'g'}")
