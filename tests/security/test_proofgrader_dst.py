"""setup_proofgrader_repo's --dst, a folder someone may have handed over (a run folder's
proofgrader_repo/), and what it says when stopped.

--dst is never written through a link: a --dst that is one is refused in one line (with --force it
would have deleted the folder it points to and put the package there), and one that holds planted
links is replaced by a rename, the links removed, never followed. After Ctrl-C it names the command
that builds the package (a build keeps nothing of an unfinished one, so that is the same command),
and that command, run through a shell as printed, builds it."""

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from optimizer.launch import python_command
from support.cli import REPO_ROOT, cli_env
from support.proofgrader_runs import setup_repo

SECONDS = 60  # a refusal takes an interpreter's start; a build a few seconds


def refused(r, *expected: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr[-2000:]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def listing(folder) -> dict:
    return {str(p.relative_to(folder)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else b"")
            for p in sorted(folder.rglob("*"))}


@pytest.mark.attack("setup_proofgrader_repo --dst naming a link to a folder of the user (a handed folder's planted "
                    "proofgrader_repo -> ~/project), with --force (which deleted that folder and put the package "
                    "there) and without, a link to a place that does not exist yet, and a fifo")
def test_a_dst_that_is_a_link_or_not_a_folder_is_refused_in_one_line(tmp_path):
    victim = tmp_path / "project"
    victim.mkdir()
    (victim / "mine.txt").write_text("the user's\n")
    before = listing(victim)
    handed = tmp_path / "handed"
    handed.mkdir()
    os.symlink(victim, handed / "proofgrader_repo")
    os.symlink(tmp_path / "elsewhere" / "deep", handed / "dangling")
    os.mkfifo(handed / "fifo")
    for dst, extra, why in (("proofgrader_repo", ["--force"], "is a link: nothing is written through it"),
                            ("proofgrader_repo", [], "is a link: nothing is written through it"),
                            ("dangling", [], "is a link: nothing is written through it"),
                            ("fifo", ["--force"], "is there and not a folder")):
        started = time.monotonic()
        r = setup_repo("--proofautograder", "--model", "openai/fake", "--dst", str(handed / dst), *extra,
                       cwd=tmp_path)
        refused(r, f"--dst {handed / dst} {why}")
        assert time.monotonic() - started < SECONDS
    assert listing(victim) == before
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in handed.iterdir()) == ["dangling", "fifo", "proofgrader_repo"]  # no staging left


@pytest.mark.attack("setup_proofgrader_repo --force onto a handed proofgrader_repo/ whose proofgrader/__init__.py "
                    "is a link to a file of the user and whose proofgrader/task_agent/ is a link to a folder of "
                    "the user")
def test_a_dst_with_planted_links_is_replaced_never_written_through(tmp_path):
    victim_file = tmp_path / "bashrc"
    victim_file.write_text("the user's shell\n")
    victim_dir = tmp_path / "project"
    victim_dir.mkdir()
    (victim_dir / "mine.py").write_text("keep = 1\n")
    before = listing(victim_dir)
    dst = tmp_path / "handed" / "proofgrader_repo"
    (dst / "proofgrader").mkdir(parents=True)
    os.symlink(victim_file, dst / "proofgrader" / "__init__.py")
    os.symlink(victim_dir, dst / "proofgrader" / "task_agent")
    os.symlink(victim_file, dst / "pyproject.toml")
    r = setup_repo("--proofautograder", "--model", "openai/fake", "--dst", str(dst), cwd=tmp_path)
    refused(r, "already exists: pass --force")  # without --force, kept as it is
    assert (dst / "proofgrader" / "__init__.py").is_symlink()
    r = setup_repo("--proofautograder", "--model", "openai/fake", "--dst", str(dst), "--force", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert victim_file.read_text() == "the user's shell\n" and listing(victim_dir) == before
    assert not [p for p in dst.rglob("*") if p.is_symlink()]
    assert "def grade" in (dst / "proofgrader" / "__init__.py").read_text()
    assert (dst / "proofgrader" / "task_agent" / "__init__.py").is_file()
    assert "[project]" in (dst / "pyproject.toml").read_text()


def test_the_package_files_are_written_through_no_link_below_the_folder(tmp_path):
    from services.errors import UserError
    from setup_proofgrader_repo import Grader, _write_package
    from support.cli import REPO_ROOT as PROJECT

    victim = tmp_path / "project"
    victim.mkdir()
    out = tmp_path / "package"
    out.mkdir()
    os.symlink(victim, out / "proofgrader")  # a link where the package's folder goes
    with pytest.raises(UserError, match="proofgrader is a link or not a folder: nothing is written through it"):
        _write_package(Grader(PROJECT, "test grader", "this project's task agent", "openai/fake"), out)
    assert list(victim.iterdir()) == []


# Runs setup_proofgrader_repo as its command does, with a pause at one step (a file says when it is
# there) where the test sends a real SIGINT: in the sandbox's import check, or once the package is in place.
PAUSED = """
import pathlib, sys, time
import setup_proofgrader_repo as spr

ready, where = pathlib.Path(sys.argv[1]), sys.argv[2]
sys.argv = ["setup_proofgrader_repo", *sys.argv[3:]]
original = getattr(spr, where)

def paused(*args, **kwargs):
    done = original(*args, **kwargs) if where == "build" else None
    ready.write_text("working")
    time.sleep(120)
    return done if where == "build" else original(*args, **kwargs)

setattr(spr, where, paused)
spr.main_cli()
"""


def interrupted(tmp_path, where: str, *args: str) -> str:
    """The last line of setup_proofgrader_repo ARGS, stopped with SIGINT at `where`."""
    ready = tmp_path / f"ready-{where}"
    proc = subprocess.Popen([sys.executable, "-c", PAUSED, str(ready), where, *args], cwd=tmp_path,
                            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and not ready.exists():
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return err.strip().splitlines()[-1]


def test_ctrl_c_prints_the_command_that_builds_the_package_and_that_command_builds_it(tmp_path, fake_openai):
    work = tmp_path / "it's here $1"  # a quote, a space and a dollar: the shell must be given them quoted
    work.mkdir()
    dst = work / "proofgrader_repo"
    args = ["--proofautograder", "--model", "openai/fake"]
    last = interrupted(work, "_check_imports", *args, "--dst", "./proofgrader_repo")
    command = shlex.join([python_command(), "-m", "setup_proofgrader_repo", *args[:1], "--dst", str(dst), *args[1:]])
    assert last == ("interrupted: a build starts afresh, and nothing of an unfinished one is kept; to build it: "
                    + command)
    assert "--resume_from" not in last
    assert sorted(p.name for p in work.iterdir()) == ["ready-_check_imports"]  # nothing kept: no dst, no staging
    elsewhere = tmp_path / "elsewhere"  # its paths are absolute: it builds the same package from any folder
    elsewhere.mkdir()
    r = subprocess.run(command, shell=True, cwd=elsewhere, env=cli_env(fake_openai), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (dst / "proofgrader" / "task_agent" / "__init__.py").is_file()

    # Stopped once the package is in place (it was not there before): the command replaces it, so it says --force.
    again = tmp_path / "again"
    again.mkdir()
    last = interrupted(again, "build", *args)
    command = shlex.join([python_command(), "-m", "setup_proofgrader_repo", *args[:1], "--dst",
                          str(again / "proofgrader_repo"), "--force", *args[1:]])
    assert last.endswith("to build it: " + command), last
    r = subprocess.run(command, shell=True, cwd=elsewhere, env=cli_env(fake_openai), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (again / "proofgrader_repo" / "proofgrader" / "provenance.json").is_file()


def test_ctrl_c_of_a_run_of_a_run_folder_gives_its_folder_and_choice(tmp_path):
    from support.proofgrader_runs import SyntheticRun

    run = SyntheticRun(tmp_path)
    run.node("1", (0.1, 0.9))
    relative = os.path.relpath(run.dir, tmp_path)
    last = interrupted(tmp_path, "_check_imports", "--generate_dir", relative, "--choose", "full_eval", "--dst", "pg")
    command = shlex.join([python_command(), "-m", "setup_proofgrader_repo", "--generate_dir", str(run.dir),
                          "--dst", str(tmp_path / "pg"), "--choose", "full_eval"])
    assert last.endswith("to build it: " + command), last
    r = subprocess.run(command, shell=True, cwd=REPO_ROOT, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# node 1" in (tmp_path / "pg" / "proofgrader" / "task_agent" / "task_agent.py").read_text()
