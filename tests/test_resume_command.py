"""What a stopped run says to do next: after Ctrl-C, run_optimization ends with the exact command that
continues the run (its folder shell-quoted, and the flags a run folder does not keep), and that command,
run through a shell as printed, finishes the run."""

import shlex
import signal
import subprocess
import sys
import time

import pytest

from optimizer.launch import python_command, resumable, resume_command
from optimizer.request import RunRequest
from services.config import Config
from services.errors import ProviderDown, advice_of
from support.cli import REPO_ROOT, cli_env
from support.scripted_loop import events, loop_config, nodes, responder


@pytest.mark.e2e
def test_ctrl_c_prints_the_command_that_resumes_and_that_command_finishes_the_run(tmp_path, fake_openai):
    fake_openai.set_responder(responder({}, []))
    fake_openai.latency = 0.2
    out = tmp_path / "my runs"
    run_dir = out / "it's run $1"  # a space, a quote and a dollar: a path the shell must be given quoted
    args = ["--domain", "imo_grading", "--output_dir", str(out), "--run_id", run_dir.name, "--task_model",
            "openai/fake", "--meta_model", "openai/fake-meta", "--config", loop_config(tmp_path),
            "--max_generation", "1", "--eval_samples", "6"]
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *args], cwd=REPO_ROOT,
                            env=cli_env(fake_openai), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not any(
                e["event"] == "split_start" for e in events(run_dir)):
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the interrupt"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    command = shlex.join([python_command(), "-m", "run_optimization", "--resume_from", str(run_dir)])
    assert err.strip().splitlines()[-1] == f"interrupted: progress so far is saved; to continue: {command}"
    assert nodes(run_dir) == {}  # stopped within the initial evaluation

    elsewhere = tmp_path / "elsewhere"  # the path is absolute: the command works from any folder
    elsewhere.mkdir()
    r = subprocess.run(command, shell=True, cwd=elsewhere, env=cli_env(fake_openai), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(nodes(run_dir)) == {"initial", "1"}


def test_the_command_gives_again_what_a_run_folder_does_not_keep(tmp_path):
    run_dir = tmp_path / "a run"
    request = RunRequest(evaluate=("1", "3"), split="test", dashboard=8800)
    argv = shlex.split(resume_command(run_dir, request))
    assert argv[1:] == ["-m", "run_optimization", "--resume_from", str(run_dir), "--evaluate", "1,3",
                        "--split", "test", "--dashboard", "8800"]
    assert shlex.split(resume_command(run_dir, RunRequest(overrides={"max_generation": 9})))[1:] == [
        "-m", "run_optimization", "--resume_from", str(run_dir)]  # a flag's value is kept in run.json
    # ...except where code runs and data goes, which a resume takes from its command line alone
    # (archive/run_folder.py): the run's own are given again, so the command does not stop at a refusal.
    own = Config.from_dict({"sandbox": {"backend": "none"}, "tracking": {"backends": ["mlflow"]},
                            "harness": {"data_files": {"amo_bench": "/data/amo bench.json"}}})
    assert shlex.split(resume_command(run_dir, RunRequest(), own))[1:] == [
        "-m", "run_optimization", "--resume_from", str(run_dir), "--sandbox", "none",
        "--data", "amo_bench=/data/amo bench.json", "--track", "mlflow"]
    assert shlex.split(resume_command(run_dir, RunRequest(), Config.from_dict({"sandbox": {"backend": "bwrap"}})))[
        1:] == ["-m", "run_optimization", "--resume_from", str(run_dir)]  # no weaker than the defaults: kept


def test_a_stop_before_the_run_exists_says_there_is_nothing_to_resume(tmp_path):
    with pytest.raises(KeyboardInterrupt) as raised, resumable(tmp_path, RunRequest()):
        raise KeyboardInterrupt
    assert advice_of(raised.value) == ("the run had not started, so there is nothing to resume: "
                                       "run the same command again")
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(ProviderDown) as down, resumable(tmp_path, RunRequest()):
        raise ProviderDown("provider for m failed", tmp_path)
    assert down.value.line() == ("provider for m failed; nothing was recorded from the failed rows; to continue: "
                                 + shlex.join([python_command(), "-m", "run_optimization", "--resume_from",
                                               str(tmp_path)]))
