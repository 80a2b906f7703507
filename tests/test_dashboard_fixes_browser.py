"""The dashboard in a real headless Chromium, for what issue 37 found wrong: a harness output folder
listed as a broken run, a comparison of one run drawing an empty chart, a finished run whose every node
stopped at screening saying "Nothing to draw yet", and the live transcript opening at its top instead of
its newest turn (and following it, but not once the reader scrolled up)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

# `driver`: one browser for the module, a fixture its tests name.
from support.browser import chromium_missing, driver, js_errors, screenshot  # noqa: F401
from support.dashboard import get, serving
from support.synthetic_run import make_run
from support.waiting import wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))]


def rewrite_initial(run: Path, **fields) -> None:
    path = run / "nodes" / "initial" / "node.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A dashboard over: runs of five nodes and of one node, a finished run whose initial node stopped at
    screening (train 0.0 on its first rows), one whose initial node was never scored, a live run with a meta
    agent at work, and two folders of domains.harness (a finished evaluation and one still at work)."""
    root = tmp_path_factory.mktemp("dash")
    make_run(root / "five", nodes=5, seed=1)
    make_run(root / "one", nodes=1, seed=1)
    make_run(root / "screened", nodes=1, seed=2)
    rewrite_initial(root / "screened", scores={"imo_grading": {"train": 0.0}}, samples={"imo_grading": {"train": 10}},
                    full_eval={"imo_grading": False}, intervals={},
                    eval_keys={"imo_grading": {"train": json.loads((root / "screened" / "nodes" / "initial" /
                                                                     "node.json").read_text())["eval_keys"][
                                                   "imo_grading"]["train"]}})
    make_run(root / "unscored", nodes=1, seed=3)
    rewrite_initial(root / "unscored", status="eval_failed", scores={}, samples={}, full_eval={}, intervals={},
                    eval_keys={}, error="the worker died")
    live = make_run(root / "live", nodes=3, seed=4, in_flight=2)
    evaluation = next((root / "five" / "evals").iterdir())  # an evaluation folder as domains.harness leaves one
    shutil.copytree(evaluation, root / "harness-eval")
    shutil.copytree(evaluation, root / "harness-at-work")
    (root / "harness-at-work" / "run.json").unlink()  # written when the harness ends
    with serving(root) as port:
        yield f"http://127.0.0.1:{port}", root, live


def test_harness_folders_are_listed_apart_as_evaluations_never_as_broken_runs(served, driver):
    from selenium.webdriver.common.by import By

    base, root, _ = served
    driver.get(base + "/")
    runs = {e.get_attribute("data-run") for e in driver.find_elements(By.CSS_SELECTOR, "tr.run")}
    assert runs == {"five", "one", "screened", "unscored", "live"}
    rows = {e.get_attribute("data-evaluation"): e.text for e in driver.find_elements(By.CSS_SELECTOR,
                                                                                         "table.evaluations tr")
            if e.get_attribute("data-evaluation")}
    assert set(rows) == {"harness-eval", "harness-at-work"}
    record = json.loads((root / "harness-eval" / "run.json").read_text())
    assert f"{record['done']}/{record['rows']}" in rows["harness-eval"] and record["model"] in rows["harness-eval"]
    journal = (root / "harness-at-work" / "predictions.jsonl").read_text().count("\n")
    assert f"no run.json yet: still running, or stopped before its end ({journal} rows in its predictions.jsonl " \
           "so far)" in rows["harness-at-work"]
    assert "not a run record" not in driver.page_source
    screenshot(driver, "dashboard-evaluations")
    assert js_errors(driver) == []
    port = int(base.rsplit(":", 1)[1])
    assert get(port, "/runs/harness-eval")[0] == 404


def test_a_dashboard_of_one_harness_folder_lists_it_as_an_evaluation(served):
    _, root, _ = served
    with serving(root / "harness-eval") as port:
        status, _, page = get(port, "/")
        assert status == 200 and 'data-evaluation="harness-eval"' in page and 'class="run"' not in page
        assert "not a run record" not in page and get(port, "/runs/harness-eval")[0] == 404


def test_comparing_one_run_draws_its_curve_or_says_why_not(served, driver):
    from selenium.webdriver.common.by import By

    base, _, _ = served
    driver.get(base + "/compare?run=one")  # one generation: one point and its interval
    point = driver.find_element(By.CSS_SELECTOR, ".compare-runs circle.point")
    bar = driver.find_element(By.CSS_SELECTOR, ".compare-runs line.band-bar")
    assert point.size["width"] > 0 and bar.size["height"] > 0
    screenshot(driver, "dashboard-compare-one-run")
    driver.get(base + "/compare?run=five")
    line = driver.find_element(By.CSS_SELECTOR, ".compare-runs polyline.series")
    assert line.size["width"] > 0 and not driver.find_elements(By.ID, "unscored")
    driver.get(base + "/compare?run=unscored&run=one")
    assert "Nothing to draw of unscored: no node that can be a parent has a score yet." in \
        driver.find_element(By.ID, "unscored").text
    assert driver.find_elements(By.CSS_SELECTOR, ".compare-runs circle.point")
    assert js_errors(driver) == []


def test_a_finished_runs_progress_is_drawn_or_says_why_not(served, driver):
    from selenium.webdriver.common.by import By

    base, _, _ = served
    driver.get(base + "/runs/screened")
    charts = driver.find_element(By.CSS_SELECTOR, "section.charts")
    assert "Nothing to draw" not in charts.text and "train, screening only" in charts.text
    dots = charts.find_elements(By.CSS_SELECTOR, "circle.dot")
    assert len(dots) == 1 and dots[0].size["width"] > 0
    screenshot(driver, "dashboard-progress-screened")
    driver.get(base + "/runs/unscored")
    assert driver.find_element(By.CSS_SELECTOR, "section.charts").text.endswith(
        "Nothing to draw: no node has a imo_grading score (1 recorded: eval_failed 1).")
    assert js_errors(driver) == []


def test_the_live_transcript_opens_at_its_newest_turn_and_stays_where_the_reader_scrolled(served, driver):
    from selenium.webdriver.common.by import By

    base, root, live = served
    meta = live["in_flight"][-1]  # the meta agents at work are the in-flight nodes after the first
    transcript = root / "live" / "untrusted" / meta / "meta" / "meta_chat_history.md"
    with transcript.open("a") as f:  # long enough to scroll within its box
        f.write("".join(f"\n## turn {i}\n\nthe agent thinks about step {i}\n" for i in range(200)))

    def position() -> dict:
        return driver.execute_script("const p = document.getElementById('transcript');"
                                     "return {top: p.scrollTop, height: p.scrollHeight, shown: p.clientHeight,"
                                     " text: p.textContent};")

    def at_end() -> bool:
        p = position()
        return p["height"] - p["top"] - p["shown"] < 30

    driver.get(f"{base}/runs/live/nodes/{meta}")
    assert driver.find_element(By.ID, "transcript-live")
    assert position()["height"] > position()["shown"] * 2 and at_end()
    with transcript.open("a") as f:
        f.write("\n## turn NEWEST-ONE\n\nit goes on\n")
    wait_for(lambda: "NEWEST-ONE" in position()["text"], 30, "the transcript's new turn")
    assert at_end()  # followed as it grows
    driver.execute_script("document.getElementById('transcript').scrollTop = 40;")  # the reader scrolls up
    with transcript.open("a") as f:
        f.write("\n## turn NEWEST-TWO\n\nand on\n")
    wait_for(lambda: "NEWEST-TWO" in position()["text"], 30, "the transcript's next turn")
    assert abs(position()["top"] - 40) < 5 and not at_end()  # left where the reader is
    screenshot(driver, "dashboard-live-transcript")
    assert js_errors(driver) == []
