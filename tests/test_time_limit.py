"""--max_minutes (loop.max_minutes, optimizer/time_limit.py): a wall-clock limit of one command, counted from its
start. At the limit the run stops as Ctrl-C stops it, resumably, and ends with the line that continues it."""

import json
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest

from optimizer.time_limit import TimeLimitReached, run_within, stopped_line
from services.errors import UserError
from support.cli import REPO_ROOT, cli_env, run_cli
from support.scripted_loop import events, loop_config, nodes, responder


def test_the_limit_stops_a_call_that_would_go_on_and_lets_a_short_one_be():
    def forever():
        while True:
            time.sleep(0.05)

    previous = signal.getsignal(signal.SIGINT)
    started = time.monotonic()
    assert run_within(0.01, started, forever) is True  # 0.6 s
    assert 0.5 < time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGINT) is previous  # Ctrl-C is Ctrl-C again
    assert run_within(1, time.monotonic(), lambda: None) is False
    assert run_within(None, 0.0, lambda: None) is False  # no limit: never the watcher's


def test_the_limit_counts_from_the_commands_start_and_ctrl_c_stays_ctrl_c():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):  # before the limit, a SIGINT is the user's
            run_within(1, time.monotonic(), lambda: signal.raise_signal(signal.SIGINT) or time.sleep(1))
    finally:
        signal.signal(signal.SIGINT, previous)
    started = time.monotonic() - 61  # the command started a minute ago: the limit of 1 min has passed already
    assert run_within(1, started, lambda: time.sleep(10)) is True
    assert time.monotonic() - started < 61 + 5


def test_the_limit_needs_the_main_thread_and_says_so():
    raised = []
    thread = threading.Thread(target=lambda: raised.append(
        pytest.raises(UserError, run_within, 1, time.monotonic(), lambda: None)))
    thread.start()
    thread.join()
    assert "main thread" in str(raised[0].value)


def test_the_stop_line_names_the_limit_and_the_command_that_continues():
    assert TimeLimitReached(2.5).why == ("the time limit of 2.5 min (--max_minutes, counted from the command's start) "
                                         "was reached")
    line = stopped_line(2.5, "python -m run_optimization --resume_from /r")
    assert line.startswith("stopped: the time limit of 2.5 min") and \
        "to continue: python -m run_optimization --resume_from /r --max_minutes 2.5 (or without" in line


@pytest.mark.e2e
def test_a_run_stops_at_its_time_limit_and_the_printed_command_continues_it(tmp_path, fake_openai):
    answer, rows, release = responder({}, []), [], threading.Event()

    def held_rows(request: dict) -> str:
        if "## Student's answer" in str(request["messages"][-1]["content"]):
            rows.append(1)
            if len(rows) > 7:  # the initial node's first 7 rows are answered, the rest wait: the limit comes in its
                release.wait(120)  # evaluation however long the command took to start
        return answer(request)

    fake_openai.set_responder(held_rows)
    args = ["run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
            "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", loop_config(tmp_path),
            "--max_generation", "1", "--max_minutes", "0.75"]
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, env=cli_env(fake_openai),
                              capture_output=True, text=True, timeout=600)
    finally:
        release.set()
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    assert "loop     1 generation, parent selection score_child_prop, time limit 0.75 min from this command's start" \
        in proc.stdout
    lines = proc.stdout.strip().splitlines()
    why = "the time limit of 0.75 min (--max_minutes, counted from the command's start) was reached"
    assert lines[-1].startswith(f"stopped: {why}; nothing recorded is lost"), proc.stdout[-3000:]
    assert f"run stopped: {why}" in lines, proc.stdout[-3000:]
    command = lines[-1].split("to continue: ", 1)[1].removesuffix(" (or without --max_minutes: no limit)")
    assert command.endswith(f"--resume_from {run_dir} --max_minutes 0.75")
    assert seconds < 45 + 40, seconds  # the limit, the interpreter's start before it, a stop's cleanup
    # The limit cut the initial node's evaluation short, as Ctrl-C would: nothing recorded, its rows kept.
    assert nodes(run_dir) == {}
    kept = sum(len(p.read_text().splitlines()) for p in (run_dir / "evals").glob("*/predictions.jsonl"))
    assert [e["why"] for e in events(run_dir) if e["event"] == "run_end"] == [why]

    fake_openai.set_responder(answer)
    argv = shlex.split(command)
    assert argv[1:3] == ["-m", "run_optimization"]
    r = run_cli(*argv[2:-2], env=cli_env(fake_openai), timeout=600)  # as printed, without the limit: to the end
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(nodes(run_dir)) == {"initial", "1"} and "run finished" in r.stdout
    assert "time limit 0.75 min from" not in r.stdout  # a resume keeps no limit unless given one
    # Node 1 made no change: the rows asked are the initial node's 40, the kept ones not again; those in flight
    # when the limit came (at most 5 workers') were asked twice.
    asked = sum(1 for q in fake_openai.requests if "## Student's answer" in json.dumps(q.get("json")))
    assert 1 <= kept <= 7 and 40 <= asked <= 40 + 5 + 7 - kept, (asked, kept)
