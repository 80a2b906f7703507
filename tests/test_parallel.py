"""Generations in flight end to end: `run_optimization --parallel N` against the fake provider,
with real sandboxes, git and gateway. Seeded runs replay; Ctrl-C and kill -9 with several
generations in flight lose nothing finished and pay nothing twice."""

import signal
import subprocess
import sys
import time

import pytest

from optimizer.launch import resume_command
from optimizer.request import RunRequest
from support.cli import REPO_ROOT, cli_env, run_cli
from support.scripted_loop import IMPROVE, META_ONLY, events, loop_config, nodes, responder

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)


def starts(run_dir) -> dict[str, str]:
    return {e["node_id"]: e["parent"] for e in events(run_dir) if e["event"] == "gen_start"}


def overlapped(run_dir) -> bool:
    """Whether some generation started while an earlier one was still unrecorded."""
    unrecorded = set()
    for e in events(run_dir):
        if e["event"] == "gen_start" and e["node_id"] != "initial":
            if unrecorded:
                return True
            unrecorded.add(e["node_id"])
        elif e["event"] == "node_recorded":
            unrecorded.discard(e["node_id"])
    return False


def test_seeded_parallel_runs_replay_and_keep_two_generations_in_flight(tmp_path, fake_openai):
    # generation 1 improves the task agent, 2 changes the meta agent only, 3 and 4 nothing
    script = {3: [IMPROVE], 2: [META_ONLY]}
    fake_openai.set_responder(responder(script, [], by_iterations_left=True))
    fake_openai.latency = 0.05
    config = loop_config(tmp_path)
    # Both runs at once: they share the machine and the server, so their timings differ.
    procs = [subprocess.Popen([sys.executable, "-m", "run_optimization", "--domain", "imo_grading", "--output_dir",
                               str(tmp_path / name), "--run_id", "run", "--task_model", "openai/fake", "--meta_model",
                               "openai/fake-meta", "--config", config, "--max_generation", "4", "--parallel", "2",
                               "--seed", "11", "--parent_selection", "random", "--eval_samples", "10"],
                              cwd=REPO_ROOT, env=cli_env(fake_openai), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for name in ("a", "b")]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert "2 in flight" in out
    a, b = (tmp_path / name / "run" for name in ("a", "b"))
    assert starts(a) == starts(b)  # the same parents, in the same order
    assert list(starts(a)) == ["initial", "1", "2", "3", "4"]
    assert starts(a)["1"] == starts(a)["2"] == "initial"  # both slots start at once, from the only node
    assert overlapped(a) and overlapped(b)
    found = nodes(a)
    assert set(found) == {"initial", "1", "2", "3", "4"}
    assert found["1"]["status"] == "ok" and found["1"]["scores"]["imo_grading"]["val"] == 1.0
    recorded = [e["node_id"] for e in events(a) if e["event"] == "node_recorded"]
    assert sorted(recorded) == sorted(found)  # each node recorded once


def test_sica_screens_against_the_best_of_what_the_generation_chose_from_not_of_what_finished_first(
        tmp_path, fake_openai):
    """--parallel 2: generation 3 chooses among generations <= 1, and node 2 (which scores 1.0) is
    recorded before generation 3 is screened. SICA's peer is the best of what generation 3 chose
    from, so its verdict does not depend on which slot finished first: a replayed run agrees."""
    run_dir = tmp_path / "out" / "run"
    base = responder({2: [META_ONLY], 1: [IMPROVE], 0: [META_ONLY]}, [], by_iterations_left=True)

    def respond(request):
        opening = " ".join(str(m["content"]) for m in request["messages"][:2])
        if "Iterations left in this run: 0." in opening:  # generation 3's meta agent waits for node 2
            deadline = time.time() + 120
            while time.time() < deadline and not (run_dir / "nodes" / "2" / "node.json").exists():
                time.sleep(0.05)
        return base(request)

    fake_openai.set_responder(respond)
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("  promotion: sica\n")
    r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id",
                "run", "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
                "--max_generation", "3", "--parallel", "2", "--seed", "5", "--eval_samples", "10",
                env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(run_dir)
    assert found["2"]["scores"]["imo_grading"]["train"] == 1.0  # the improved agent, recorded before 3's screening
    recorded = [e["node_id"] for e in events(run_dir) if e["event"] == "node_recorded"]
    assert recorded.index("2") < recorded.index("3")
    line = found["3"]["screening"]["imo_grading"][0]
    # Generation 3 (same task agent as the initial one) is compared with the best of generations <= 1,
    # which it matches; against node 2 it would have been stopped.
    assert line.startswith("10 rows: on: sica: ") and line.endswith(("(best node initial)", "(best node 1)")), line
    assert found["3"]["full_eval"] == {"imo_grading": True}


def test_ctrl_c_and_kill_with_generations_in_flight_then_resume_pays_nothing_twice(tmp_path, fake_openai):
    meta_calls = []
    fake_openai.set_responder(responder({3: [IMPROVE], 2: [META_ONLY], 1: [META_ONLY]}, meta_calls,
                                        by_iterations_left=True))
    fake_openai.latency = 0.3
    config = loop_config(tmp_path)
    run_dir = tmp_path / "out" / "run"
    first = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
             "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
             "--max_generation", "4", "--parallel", "3", "--parent_selection", "best", "--eval_samples", "10"]
    resume = ["--resume_from", str(run_dir)]

    # 1. Ctrl-C while three meta agents work: a clean end, soon, with nothing left running
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *first], cwd=REPO_ROOT,
                            env=cli_env(fake_openai), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and len(starts(run_dir)) < 4:
            time.sleep(0.05)
        while time.time() < deadline and proc.poll() is None and len(meta_calls) < 3:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the interrupt"
        proc.send_signal(signal.SIGINT)
        pressed = time.time()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert time.time() - pressed < 30 and f"to continue: {resume_command(run_dir, RunRequest())}" in err
    # Quietly: the gateway's connections cut by the interrupt print nothing (no BrokenPipeError tracebacks).
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
    leftover = subprocess.run(["pgrep", "-f", f"{tmp_path}.*meta"], capture_output=True, text=True).stdout
    assert leftover == ""
    assert set(starts(run_dir)) == {"initial", "1", "2", "3"} and set(nodes(run_dir)) == {"initial"}

    # 2. kill -9 once a meta agent's change is committed, the others still in flight
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *resume], cwd=REPO_ROOT,
                            env=cli_env(fake_openai), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and \
                not any(e["event"] == "meta_done" for e in events(run_dir)):
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the kill"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    committed = {e["node_id"] for e in events(run_dir) if e["event"] == "meta_done"}
    parents = starts(run_dir)

    # 3. resume to the end
    meta_runs_before = sum(1 for r in meta_calls if not any(m["role"] == "assistant" for m in r["messages"]))
    r = run_cli("run_optimization", *resume, env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    found = nodes(run_dir)
    assert set(found) == {"initial", "1", "2", "3", "4"}
    assert {k: v for k, v in starts(run_dir).items() if k in parents} == parents  # redone from the same parents
    recorded = [e["node_id"] for e in events(run_dir) if e["event"] == "node_recorded"]
    assert sorted(recorded) == sorted(found)
    # a committed change is never asked for again: only the others and generation 4 run their meta agents
    # (a redone run's first, temperature-0 request may come from the gateway's cache)
    meta_runs = sum(1 for r in meta_calls if not any(m["role"] == "assistant" for m in r["messages"]))
    assert 1 <= meta_runs - meta_runs_before <= 4 - len(committed)
    import sqlite3
    from datetime import datetime

    db = sqlite3.connect(run_dir / "ledger.sqlite")
    for e in events(run_dir):
        if e["event"] == "meta_done" and e["node_id"] in committed:
            since = datetime.fromisoformat(e["time"]).timestamp() + 1  # event times have 1 s resolution
            late = db.execute("SELECT COUNT(*) FROM calls WHERE node = ? AND role = 'meta' AND ts > ?",
                              (e["node_id"], since))
            assert late.fetchone()[0] == 0
    assert found["1"]["status"] == "ok" and found["1"]["scores"]["imo_grading"]["val"] == 1.0
