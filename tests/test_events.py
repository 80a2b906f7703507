"""The loop's events: what subscribers get, what the console says, and pictures that fail to draw."""

from apps.pictures import draw
from archive.records import MetaResult, Node, Status
from archive.store import Archive
from domains.registry import get_domain
from optimizer.events import (
    CostBooked,
    Events,
    GenerationStarted,
    MetaFinished,
    NodeFinished,
    Pictures,
    SplitDone,
    Warned,
    console_line,
)


def test_every_subscriber_gets_every_event_in_order():
    seen = []
    events = Events(lambda e: seen.append(("first", e)))
    events.subscribe(lambda e: seen.append(("second", e)))
    started, booked = GenerationStarted("1", "initial", 1, 60.0, 5), CostBooked("1", "meta", 0.5, 100)
    events.emit(started)
    events.emit(booked)
    assert seen == [("first", started), ("second", started), ("first", booked), ("second", booked)]


def test_console_lines():
    assert console_line(GenerationStarted("3", "1", 3, 120.0, 40)) == (
        "generation 3: node 3 from parent 1; the meta agent is at work (up to 120 s and 40 model calls)")
    result = MetaResult(Status.OK, "abc", {"files": 2, "insertions": 5, "deletions": 1, "dropped": ["domains"]}, 1.0)
    assert console_line(MetaFinished("3", result)) == "node 3: ok; changed 2 files (+5 -1), dropped domains"
    node = Node("3", "1", 3, status=Status.LOAD_FAILED, cost_usd={"meta": 0.25, "task": 0.5})
    assert console_line(NodeFinished(node)) == "node 3 (parent 1): load_failed; not scored; cost $0.7500"
    node = Node("4", "3", 4, scores={"imo_grading": {"train": 0.5, "val": None}})
    assert console_line(NodeFinished(node)) == "node 4 (parent 3): ok; imo_grading/train=0.500; cost $0.0000"
    assert console_line(Warned("careful")) == "warning: careful"
    assert console_line(SplitDone("3", "ab12", "10/10 rows done, 0 errors")) == "10/10 rows done, 0 errors"
    assert console_line(CostBooked("3", "meta", 0.25, 10)) is None


def test_pictures_are_redrawn_after_a_node_and_a_failure_is_a_warning(tmp_path):
    domain = get_domain("imo_grading")
    archive = Archive(tmp_path)
    archive.record(Node("initial", None, 0, scores={"imo_grading": {"train": 0.3, "val": 0.4}},
                        samples={"imo_grading": {"train": 100, "val": 100}}, full_eval={"imo_grading": True}))
    seen = []
    events = Events(seen.append)
    events.subscribe(Pictures(archive, [domain], {"imo_grading": 100}, tmp_path, events, drawing=draw))
    events.emit(NodeFinished(archive.nodes["initial"]))
    assert (tmp_path / "report.html").is_file() and not any(isinstance(e, Warned) for e in seen)
    (tmp_path / "report.html").unlink()
    (tmp_path / "report.html").mkdir()  # nothing can be written there now
    events.emit(NodeFinished(archive.nodes["initial"]))
    warned = [e for e in seen if isinstance(e, Warned)]
    assert len(warned) == 1 and warned[0].message.startswith("plots not updated: ")


def test_nodes_that_come_back_together_are_drawn_once_and_the_last_one_is_caught_up(tmp_path):
    domain = get_domain("imo_grading")
    archive = Archive(tmp_path)
    node = Node("initial", None, 0, scores={"imo_grading": {"train": 0.3, "val": 0.4}},
                samples={"imo_grading": {"train": 100, "val": 100}}, full_eval={"imo_grading": True})
    archive.record(node)
    events = Events(lambda event: None)
    pictures = Pictures(archive, [domain], {"imo_grading": 100}, tmp_path, events, every_s=10, drawing=draw)
    now = [1000.0]
    pictures.clock = lambda: now[0]
    events.subscribe(pictures, on_wait=pictures.catch_up)
    report = tmp_path / "report.html"
    events.emit(NodeFinished(node))  # the first node is drawn at once
    first = report.stat().st_mtime_ns
    now[0] += 5
    events.emit(NodeFinished(node))  # the next, 5 s later: left for later
    events.waiting()
    assert report.stat().st_mtime_ns == first
    now[0] += 5
    events.waiting()  # the controller waits 10 s after the drawing: now it is drawn
    assert report.stat().st_mtime_ns > first
    drawn = report.stat().st_mtime_ns
    now[0] += 60
    events.waiting()  # nothing new came back: no drawing
    assert report.stat().st_mtime_ns == drawn
