"""Agent code that fills the disk under its writable folders, to make the host's next write fail for a full
disk: that is this machine's failure (MachineDown, exit 74), which records nothing and which every resume
met again. A sandbox's room is now what the disk can give while keeping a reserve for the host's records
(services/sandbox/disk_room.py): filling the disk into that reserve is the agent's failure (`disk_capped`),
and what it wrote is removed until the host has its reserve again.

Most tests see a small disk through `disk_space` (its free space is what a folder does not hold), so they
run anywhere; the last runs the harness on a real 1500 MB tmpfs in a mount namespace of its own (root).
"""

import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import services.sandbox.base as base
import services.sandbox.disk_room as disk_room
from services.config import SandboxConfig
from services.errors import MachineDown
from services.sandbox import Mount, open_sandbox
from support.backends import BACKENDS
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env

SIZE = 64 * 2**20  # the small disk: its reserve is a quarter of it (16 MB), its floor 4 MB
RESERVE = disk_room.reserve_of(SIZE)


def held(root: Path) -> int:
    """Bytes on disk under `root`."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """tmp_path/disk as a disk of SIZE bytes, as far as the sandboxes see: its free space is SIZE less what
    the folder holds."""
    from services.sandbox.bwrap import bwrap_unavailable

    bwrap_unavailable()  # its one self-test sandbox, on the real disk: done before the disk is made small
    root = tmp_path / "disk"
    root.mkdir()
    monkeypatch.setattr(disk_room, "disk_space", lambda path: (SIZE, max(0, SIZE - held(root))))
    return root


def free(root: Path) -> int:
    return SIZE - held(root)


def fill_code(folder: str, mb: int, then: str = "time.sleep(60)") -> str:
    """Python that allocates `mb` files of 1 MB in `folder` (posix_fallocate, as fast as a disk allows)."""
    return textwrap.dedent(f"""
        import os, time
        for i in range({mb}):
            fd = os.open(os.path.join({folder!r}, f"fill-{{i}}"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.posix_fallocate(fd, 0, 2**20)
            os.close(fd)
    """) + then + "\n"


def box_in(root: Path, backend: str, config: SandboxConfig | None = None):
    (root / "ws").mkdir(exist_ok=True)
    (root / "out").mkdir(exist_ok=True)
    return open_sandbox(config or SandboxConfig(backend=backend), root / "ws",
                        [Mount(root / "out", "/out/agent_evals", writable=True)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.attack("agent code: fills the disk under its writable folders, which has less room than sandbox.disk_mb, "
                    "so the host's next write (the journal, the ledger) fails and the run stops as this machine's "
                    "failure")
def test_filling_the_disk_into_the_hosts_reserve_is_the_agents_failure(backend, small_disk):
    with box_in(small_disk, backend) as box:
        started = time.monotonic()
        result = box.run([box.python, "-c", fill_code("/out/agent_evals", 56)], box.base_env(), timeout=50)
    assert time.monotonic() - started < 20 and not result.ok
    # The agent's failure, in its words: the host's reserve, and what it wrote (no machine failure).
    assert result.why().startswith("killed for filling the disk its folders are on: it wrote "), result.why()
    assert result.why().endswith(f"less than the {RESERVE // 2**20} MB the host keeps for its own records")
    # What it wrote is removed, largest first, until the host has its reserve again.
    assert free(small_disk) >= RESERVE


@pytest.mark.parametrize("hook", ["run", "closed", "check_stopped"])
@pytest.mark.attack("agent code: fills the disk in a moment, between two rounds of the disk watch, and answers at once")
def test_a_disk_filled_between_two_rounds_of_the_watch_is_found_before_the_host_writes(hook, small_disk, monkeypatch):
    # The watch never comes round: only the host's own checks find the disk full (before it keeps a
    # command's result, before the gateway serves a call, before the harness keeps a row).
    monkeypatch.setattr(base, "FREE_CHECK_S", 3600)
    monkeypatch.setattr(base, "DISK_CHECK_S", 3600)
    with box_in(small_disk, "bwrap") as box:
        if hook == "run":
            result = box.run([box.python, "-c", fill_code("/out/agent_evals", 56, "")], box.base_env(), timeout=50)
            assert not result.ok and result.disk_capped and "filling the disk" in result.why()
        else:
            proc = box.popen([box.python, "-c", fill_code("/out/agent_evals", 56, "print('full', flush=True)\n"
                                                                                  "time.sleep(60)")], box.base_env())
            assert proc.stdout.readline().strip() == "full"
            if hook == "closed":
                assert box.closed  # the gateway refuses the session's call
            else:
                box.check_stopped("the agent's worker")  # not the host's closing: no SandboxClosed
            assert proc.poll() is not None, "the filler is killed"
        assert box.disk_capped and box.disk_capped.startswith("filling the disk its folders are on")
        assert free(small_disk) >= RESERVE


@pytest.mark.attack("agent code: writes a little while something else fills the disk, to be blamed for it")
def test_a_disk_filled_by_something_else_stays_the_machines(small_disk):
    with box_in(small_disk, "bwrap") as box:
        done = threading.Event()

        def host_fills():  # the host (or another program) takes the disk beside the sandbox's folders
            with open(small_disk / "filler", "wb") as f:
                os.posix_fallocate(f.fileno(), 0, 56 * 2**20)
            done.set()

        threading.Thread(target=host_fills).start()
        code = fill_code("/out/agent_evals", 1, "time.sleep(3)")
        result = box.run([box.python, "-c", code], box.base_env(), timeout=50)
    assert done.is_set() and free(small_disk) < RESERVE
    assert result.ok and box.disk_capped is None, result.why()  # not the agent's: the host's write meets it
    assert (small_disk / "filler").stat().st_size == 56 * 2**20  # nothing of the host's is removed


@pytest.mark.attack("agent code: fills the disk while another sandbox on it writes a little, so both are blamed")
def test_only_the_sandbox_that_filled_a_shared_disk_is_stopped(small_disk):
    (small_disk / "a").mkdir()
    (small_disk / "b").mkdir()
    results = {}

    def run(name, mb, then):
        with open_sandbox(SandboxConfig(backend="bwrap"), small_disk / name) as box:
            results[name] = box.run([box.python, "-c", fill_code("/workspace", mb, then)], box.base_env(), timeout=50)

    threads = [threading.Thread(target=run, args=("b", 2, "time.sleep(4)")),
               threading.Thread(target=run, args=("a", 56, "time.sleep(60)"))]
    threads[0].start()
    deadline = time.monotonic() + 30
    while len(os.listdir(small_disk / "b")) < 2 and time.monotonic() < deadline:  # b wrote before a fills
        time.sleep(0.05)
    threads[1].start()
    for t in threads:
        t.join(60)
    assert "filling the disk its folders are on" in results["a"].why()
    assert results["b"].ok, results["b"].why()
    assert free(small_disk) >= RESERVE and len(os.listdir(small_disk / "b")) == 2


@pytest.mark.attack("agent code: left the disk under its folders full (in a run before this check), so every "
                    "resume reruns it into a full disk")
def test_a_sandbox_does_not_open_on_a_disk_without_the_hosts_reserve(small_disk):
    with open(small_disk / "left", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 56 * 2**20)
    with pytest.raises(MachineDown) as stop:
        with box_in(small_disk, "bwrap"):
            pytest.fail("opened")
    assert stop.value.reason == (f"the disk holding {small_disk / 'ws'} has {disk_room.mb(free(small_disk))} MB free, "
                                 f"less than the {RESERVE // 2**20} MB kept for the host's own records while agent "
                                 "code writes there")


# -- the attack as it came: the harness's run folder on a 1500 MB disk ------------------------------

def q(argv: list[str]) -> str:
    return " ".join(map(shlex.quote, argv))


def _can_mount() -> str | None:
    """None when this process may mount a tmpfs in a private mount namespace, else why not."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("bwrap"):
        return "needs root, unshare and bwrap"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1M tmpfs /mnt"], capture_output=True,
                           text=True, timeout=30)
    return None if probe.returncode == 0 else f"cannot mount in a private namespace: {probe.stderr.strip()[:200]}"


_WHY_NOT_MOUNT = _can_mount()

# Row 1 is answered; on row 2 (and on every later try) forward() fills its transcripts folder, the run
# folder's agent_evals/, to the last byte, then calls the model: the gateway books the call in the ledger.
FILLER = '''
import os
from agent.llm import get_response

class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.model, self.file = model, chat_history_file

    def forward(self, inputs):
        folder = os.path.dirname(self.file)
        if not os.path.exists(os.path.join(folder, "seen")):
            open(os.path.join(folder, "seen"), "w").close()
            return "1", []
        n = 0
        for size in (64 * 2**20, 2**20, 4096):
            while True:
                try:
                    fd = os.open(os.path.join(folder, f"fill-{os.getpid()}-{n}"), os.O_WRONLY | os.O_CREAT, 0o644)
                    n += 1
                    try:
                        os.posix_fallocate(fd, 0, size)
                    finally:
                        os.close(fd)
                except OSError:
                    break
        return get_response([{"role": "user", "content": "grade"}], self.model).text, []
'''


@pytest.mark.e2e
@pytest.mark.skipif(_WHY_NOT_MOUNT is not None, reason=str(_WHY_NOT_MOUNT))
@pytest.mark.attack("task agent: fills the disk of the run folder (1500 MB, less than sandbox.disk_mb) through its "
                    "transcripts folder, so the journal or the ledger meets a full disk (exit 74) on the run and on "
                    "every resume")
def test_a_task_agent_that_fills_the_run_folders_disk_fails_as_the_agent_and_a_resume_does_not_loop(tmp_path,
                                                                                                    fake_openai):
    disk = tmp_path / "disk"
    disk.mkdir()
    agent, config = tmp_path / "agent.py", tmp_path / "c.yaml"
    agent.write_text(FILLER)
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  num_workers: 1\n"))
    flags = ["--domain", "imo_grading", "--subset", "train", "--num_samples", "2", "--agent_path", str(agent),
             "--model", "openai/fake", "--config", str(config), "--sandbox", "bwrap"]
    run = [sys.executable, "-m", "domains.harness", *flags, "--output_dir", str(disk), "--run_id", "fill"]
    resume = [sys.executable, "-m", "domains.harness", *flags, "--resume_from", str(disk / "fill")]
    report = [sys.executable, "-c", "import os, sys; s = os.statvfs(sys.argv[1]); "
              "print('free', s.f_bavail * s.f_frsize)", str(disk)]
    line = (f"mount -t tmpfs -o size=1500m tmpfs {shlex.quote(str(disk))} || exit 99; "
            f"{q(run)}; echo rc $?; {q(report)}; {q(resume)}; echo rc $?; {q(report)}; "
            f"cp {shlex.quote(str(disk / 'fill' / 'predictions.jsonl'))} {shlex.quote(str(tmp_path))}")
    started = time.monotonic()
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", line], cwd=REPO_ROOT,
                       env=cli_env(fake_openai, TQDM_DISABLE="1"), capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    out = r.stdout.splitlines()
    codes = [int(x.split()[1]) for x in out if x.startswith("rc ")]
    frees = [int(x.split()[1]) for x in out if x.startswith("free ")]
    errors = [x for x in r.stderr.splitlines() if x.startswith(("error:", "stopped:"))]
    # Each time the agent's failure (exit 2, its sandbox stopped with the reason), never this machine's
    # (exit 74): the run and its resume alike, and the disk has the host's reserve again after each.
    assert codes == [2, 2], r.stdout + r.stderr[-3000:]
    reason = "error: the agent's sandbox was stopped for filling the disk its folders are on: it wrote "
    assert len(errors) == 2 and all(e.startswith(reason) for e in errors), errors
    assert all(f >= disk_room.reserve_of(1500 * 2**20) for f in frees), frees
    assert (tmp_path / "predictions.jsonl").read_text().count("\n") == 1  # row 1 kept, row 2 never the machine's
    assert took < 60, took
