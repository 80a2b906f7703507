"""Generations in flight (optimizer.slots): who starts when, what each one may choose from,
and what is left after a budget stop or a cancel. A real Archive on disk; the generations
themselves are stood in for by threads that sleep (the loop end to end with --parallel is
in test_parallel.py)."""

import _thread
import random
import threading
import time
from types import SimpleNamespace

import pytest

from archive.records import GenStart, Node, Status
from archive.store import Archive
from optimizer.events import Events
from optimizer.slots import Slots
from services.config import Config


class StandIn:
    """What Slots asks of the loop: its archive, context and events, a parent, one generation."""

    def __init__(self, tmp_path, max_generation: int, seconds, status=lambda g: Status.OK, hang=lambda g: True):
        self.archive = Archive(tmp_path)
        self.archive.record(Node("initial", None, 0, scores={"d": {"train": 0.5}}))
        config = Config()
        config.loop.max_generation = max_generation
        self.ctx = SimpleNamespace(config=config, loop=config.loop)
        self.events = Events()
        self.seconds, self.status, self.hang = seconds, status, hang
        self.lock = threading.Lock()
        self.running, self.most_running = set(), 0
        self.chosen: list[tuple[int, int | None, list[int]]] = []  # generation, upto, recorded generations
        self.release = threading.Event()  # generations that hang wait for it
        self.release.set()

    def begin(self, generation: int, upto: int | None) -> GenStart:
        recorded = sorted(n.generation for n in self.archive.ordered())
        self.chosen.append((generation, upto, recorded))
        visible = [n for n in self.archive.ordered() if upto is None or n.generation <= upto]
        return GenStart(str(generation), max(visible, key=lambda n: n.generation).node_id, generation)

    def generation(self, start: GenStart) -> Node:
        node_id, parent, generation = start.node_id, start.parent, start.generation
        with self.lock:
            self.running.add(node_id)
            self.most_running = max(self.most_running, len(self.running))
        time.sleep(self.seconds(generation))
        if self.hang(generation):
            self.release.wait()
        with self.lock:
            self.running.discard(node_id)
        return Node(node_id, parent, generation, status=self.status(generation))


def test_replayable_slots_keep_n_in_flight_and_choose_only_among_finished_generations(tmp_path):
    rng = random.Random(3)
    uneven = {g: rng.choice([0.01, 0.05, 0.2]) for g in range(1, 11)}
    loop = StandIn(tmp_path, 10, uneven.get)
    Slots(loop, parallel=3, replayable=True).run()
    assert loop.most_running == 3
    assert sorted(loop.archive.nodes) == sorted(["initial", *map(str, range(1, 11))])
    for generation, upto, recorded in loop.chosen:
        assert upto == max(generation - 3, 0)
        # everything g may see was recorded when it chose: what it saw does not depend on timing
        assert set(range(0, upto + 1)) <= set(recorded)
    parents = {n.node_id: n.parent for n in loop.archive.ordered()}
    assert parents["1"] == parents["2"] == parents["3"] == "initial" and parents["4"] == "1" and parents["10"] == "7"
    starts = [e["node_id"] for e in loop.archive.events() if e["event"] == "gen_start"]
    assert starts == [str(g) for g in range(1, 11)]


def test_eager_slots_start_as_soon_as_one_frees(tmp_path):
    # Generation 1 is slow: eagerly, generations 3, 4, ... start while it runs.
    loop = StandIn(tmp_path, 6, lambda g: 0.6 if g == 1 else 0.02)
    Slots(loop, parallel=2, replayable=False).run()
    assert all(upto is None for _, upto, _ in loop.chosen)
    assert [g for g, _, recorded in loop.chosen if 1 not in recorded] == [1, 2, 3, 4, 5, 6]
    # replayable, generation 3 had to wait for generation 1
    replay = StandIn(tmp_path / "replay", 6, lambda g: 0.6 if g == 1 else 0.02)
    Slots(replay, parallel=2, replayable=True).run()
    assert all(1 in recorded for g, _, recorded in replay.chosen if g >= 3)


def test_a_budget_stop_starts_nothing_new_and_lets_the_slots_in_flight_finish(tmp_path):
    loop = StandIn(tmp_path, 20, lambda g: 0.25 * g, status=lambda g: Status.BUDGET_STOPPED if g == 2 else Status.OK)
    Slots(loop, parallel=3, replayable=True).run()
    statuses = {n.node_id: n.status for n in loop.archive.ordered()}
    assert statuses["2"] == Status.BUDGET_STOPPED
    assert set(statuses) == {"initial", "1", "2", "3", "4"}  # 4 started when 1 finished, before 2 stopped
    assert loop.archive.pending_generations() == []


def test_ctrl_c_records_what_came_back_and_leaves_the_rest_to_resume(tmp_path, monkeypatch):
    loop = StandIn(tmp_path, 5, lambda g: 0.0, hang=lambda g: g != 1)  # 1 comes back at once, the rest hang
    loop.release.clear()
    # What is in flight comes back only once the cancel closes its sandboxes, as a killed sandbox's
    # generation does (however late the controller sees the Ctrl-C on a loaded machine).
    monkeypatch.setattr("optimizer.slots.close_all", loop.release.set)

    def press_ctrl_c():
        while "4" not in loop.running:  # 4 starts once 1 is recorded (it chooses among generations <= 1)
            time.sleep(0.01)
        _thread.interrupt_main()  # as SIGINT does, in the controller's thread

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        Slots(loop, parallel=3, replayable=True).run()
    archive = Archive(tmp_path)
    assert sorted(archive.nodes) == ["1", "initial"]
    assert [s.node_id for s in archive.pending_generations()] == ["2", "3", "4"]  # --resume_from redoes them
    again = StandIn(tmp_path, 5, lambda g: 0.0)
    again.archive = archive
    Slots(again, parallel=3, replayable=True).run()
    assert sorted(again.archive.nodes) == ["1", "2", "3", "4", "5", "initial"]
    assert [g for g, _, _ in again.chosen] == [5]  # the three pending kept their parents


def test_a_generation_whose_machine_is_lost_runs_again_and_is_reopened_on_resume(tmp_path):
    from services.sandbox import SandboxLost

    tries = {}

    class Losing(StandIn):
        def generation(self, start):
            tries[start.generation] = tries.get(start.generation, 0) + 1
            if start.generation == 3 or (start.generation == 2 and tries[2] == 1):
                raise SandboxLost("the Ray node running it was removed")
            return super().generation(start)

    warnings = []
    loop = Losing(tmp_path, 3, lambda g: 0.0)
    loop.events.subscribe(lambda e: warnings.append(getattr(e, "message", None)))
    Slots(loop, parallel=2, replayable=True).run()
    assert tries == {1: 1, 2: 2, 3: 3}
    assert {n.node_id: n.status for n in loop.archive.ordered()} == {
        "initial": Status.OK, "1": Status.OK, "2": Status.OK, "3": Status.LOST}
    assert "the Ray node running it was removed" in loop.archive.nodes["3"].error
    assert sum(1 for w in warnings if w and "running it again" in w) == 1 + 2
    again = Archive(tmp_path)
    again.reopen_unfinished()  # as a resumed run does: the lost node is redone
    assert [s.node_id for s in again.pending_generations()] == ["3"]


DROPPED_CTRL_C = """
import os, signal, sys, time, weakref
from services.errors import exit_on_user_error, raise_if_stop_was_dropped

class Thing:
    pass

def main():
    thing = Thing()
    # Ctrl-C while a weakref callback runs: Python prints the KeyboardInterrupt and drops it.
    ref = weakref.ref(thing, lambda _: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.5)))
    del thing
    for _ in range(50):  # a loop that polls, as Slots.run and the harness's scheduler do
        if sys.argv[1] == "checked":
            raise_if_stop_was_dropped()
        time.sleep(0.02)
    print("went on")

exit_on_user_error(main)
"""


@pytest.mark.parametrize("loop", ["checked", "unchecked"])
def test_a_ctrl_c_that_python_dropped_still_stops_a_loop_that_polls(loop):
    import subprocess
    import sys

    from support.cli import REPO_ROOT

    r = subprocess.run([sys.executable, "-c", DROPPED_CTRL_C, loop], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=60)
    assert "KeyboardInterrupt" in r.stderr  # Python's own note that it dropped one
    if loop == "checked":
        assert r.returncode == 130 and "rerun with --resume_from" in r.stderr and "went on" not in r.stdout
    else:  # what the run did before the check: it went on as if no Ctrl-C came
        assert r.returncode == 0 and "went on" in r.stdout


CAUGHT_THEN_RESUMED = """
import os, signal, sys, time
from services.errors import exit_on_user_error, raise_if_stop_was_dropped

def main():
    try:  # a command that ran earlier in this process: its Ctrl-C reached the handler of exit_on_user_error
        exit_on_user_error(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))
    except SystemExit as e:
        print("first ended", e.code)
    for _ in range(20):  # a loop resumed later in the same process polls for a dropped Ctrl-C
        raise_if_stop_was_dropped()
        time.sleep(0.01)
    print("resumed loop went on")

main()
"""


def test_a_ctrl_c_that_reached_a_handler_is_not_raised_again_in_a_later_loop():
    """The kept stop signal is for a Ctrl-C Python dropped; one a handler caught is forgotten (an xdist worker
    once died: a test after an in-process command that had been interrupted raised that old Ctrl-C again)."""
    import subprocess
    import sys

    from support.cli import REPO_ROOT

    r = subprocess.run([sys.executable, "-c", CAUGHT_THEN_RESUMED], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "first ended 130" in r.stdout and "resumed loop went on" in r.stdout
