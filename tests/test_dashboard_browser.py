"""The dashboard in a real headless Chromium, watching a real run (the loop, the fake OpenAI
server, bwrap): open the run, see a generation in flight, open a node (its diff and the meta
agent's transcript), compare it with its parent, then watch the next node appear without a
reload. Screenshots go to tests/artifacts/ (the README's picture is one of them)."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request

import pytest

from support.browser import chromium_missing, js_errors, open_browser, screenshot
from support.cli import REPO_ROOT, cli_env
from support.scripted_loop import IMPROVE, MARKER, loop_config, responder
from support.waiting import wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))]


def read_lines(stream, lines: list[str]) -> threading.Thread:
    def run() -> None:
        for line in stream:
            lines.append(line)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_watch_a_run_open_a_node_compare_and_see_the_next_node_arrive(tmp_path, fake_openai):
    from selenium.webdriver.common.by import By

    # Generation 1's meta agent makes the improving edit; generation 2's is held at its first
    # call until the browser has looked at the run, so node 2 is in flight meanwhile; generation
    # 3's until the browser saw node 2 arrive (the dashboard ends with the run).
    answer, starts = responder({1: [IMPROVE]}, []), []
    held, released, finish = threading.Event(), threading.Event(), threading.Event()

    def respond(request: dict) -> str:
        messages = request["messages"]
        opening = " ".join(str(m["content"]) for m in messages[:2])
        if "/workspace" in opening and "/feedback" in opening and not any(m["role"] == "assistant" for m in messages):
            starts.append(1)
            if len(starts) == 2:
                held.set()
                released.wait(300)
            elif len(starts) == 3:
                finish.wait(300)
        return answer(request)

    fake_openai.set_responder(respond)
    run = subprocess.Popen([sys.executable, "-m", "run_optimization", "--domain", "imo_grading", "--run_id", "run",
                            "--output_dir", str(tmp_path / "out"), "--task_model", "openai/fake", "--meta_model",
                            "openai/fake-meta", "--config", loop_config(tmp_path), "--max_generation", "3",
                            "--parent_selection", "latest", "--dashboard", "0"], cwd=REPO_ROOT,
                           env=cli_env(fake_openai), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    read_lines(run.stdout, out)
    try:
        line = wait_for(lambda: next((x for x in out if x.startswith("dashboard http")), None), 120,
                        "the dashboard's address")
        address = line.split()[1]
        assert address.startswith("http://127.0.0.1:") and address.endswith("/runs/run")
        wait_for(held.is_set, 300, "generation 2's meta agent")
        with open_browser() as driver:
            driver.get(address)
            assert driver.title.startswith("run") and "Run run" in driver.find_element(By.TAG_NAME, "h1").text
            shown = {e.get_attribute("data-node") for e in driver.find_elements(By.CSS_SELECTOR, "a.tree-node")}
            assert shown == {"initial", "1"}
            assert driver.find_elements(By.CSS_SELECTOR, 'g.tree-node[data-node="2"] .status-in_flight')
            assert "meta agent at work" in driver.find_element(By.CSS_SELECTOR, "section.flight").text
            screenshot(driver, "dashboard-run-in-flight")

            # A node: its diff and its meta agent's transcript.
            driver.find_element(By.CSS_SELECTOR, 'a.tree-node[data-node="1"]').click()
            wait_for(lambda: driver.find_elements(By.ID, "patch"), 10, "node 1's page")
            assert "Node 1" in driver.find_element(By.TAG_NAME, "h1").text
            patch = driver.find_element(By.ID, "patch")
            assert MARKER in patch.text and patch.find_elements(By.CSS_SELECTOR, "span.add")
            assert "task_agent.py" in driver.find_element(By.ID, "transcript").text
            assert driver.find_elements(By.CSS_SELECTOR, "table.predictions tr.right")
            screenshot(driver, "dashboard-node")

            # Node 1 against its parent: the code diff and rows whose prediction changed for the better.
            driver.find_element(By.ID, "vs-parent").click()
            wait_for(lambda: driver.find_elements(By.ID, "code-diff"), 10, "the comparison")
            assert MARKER in driver.find_element(By.ID, "code-diff").text
            summaries = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".changed-summary")]
            assert summaries and all(" 0 worse" in s for s in summaries), summaries
            assert any(" 0 better" not in s for s in summaries), summaries
            screenshot(driver, "dashboard-compare")

            # Back to the run: node 2 arrives without a reload.
            driver.get(address)
            driver.execute_script("window.sameDocument = 1;")
            released.set()
            wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, 'a.tree-node[data-node="2"]'), 240,
                     "node 2 in the tree")
            # Node 2 was recorded, then node 3 started (its meta agent is held): the page follows both.
            wait_for(lambda: {e.get_attribute("data-node") for e in driver.find_elements(By.CSS_SELECTOR,
                                                                                         "tr.in-flight")} == {"3"},
                     60, "node 3 in flight")
            assert driver.execute_script("return window.sameDocument") == 1
            screenshot(driver, "dashboard-run")
            assert js_errors(driver) == []
        finish.set()
        assert run.wait(300) == 0, run.stderr.read()[-3000:]
    finally:
        released.set()
        finish.set()
        if run.poll() is None:
            run.kill()
    # The dashboard ended with the run.
    wait_for(lambda: not reachable(address), 10, "the dashboard to stop")


def reachable(address: str) -> bool:
    try:
        with urllib.request.urlopen(address, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_report_html_is_one_file_made_of_the_same_pieces(tmp_path):
    """report.html of a run: no script, nothing fetched from beside it or elsewhere."""
    from selenium.webdriver.common.by import By

    from apps.report import write_report
    from support.synthetic_run import make_run

    make_run(tmp_path / "run", nodes=30, seed=3)
    page = write_report(tmp_path / "run", tmp_path / "report.html").read_text()
    assert "<script" not in page and " src=" not in page and "<link" not in page
    assert page.count('class="tree-node') == 30 and "<style>" in page
    with open_browser() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.tree .tree-node")) == 30
        assert js_errors(driver) == []
        screenshot(driver, "report")


def test_hostile_text_never_runs_and_the_tree_pans_and_zooms(tmp_path):
    """A run whose agents wrote script, handlers and javascript: links everywhere: in a real
    browser none of it runs (the page would have set window.__pwned, or Chromium would report a
    refused inline script), and the tree of 60 nodes can be zoomed and dragged."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from support.dashboard import serving
    from support.synthetic_run import make_run

    summary = make_run(tmp_path / "runs" / "hostile", nodes=60, seed=5, hostile=True)
    attacks = summary["hostile"]["patch"]
    with serving(tmp_path / "runs") as port:
        base = f"http://127.0.0.1:{port}/runs/hostile"
        with open_browser() as driver:
            driver.get(base)
            tree = driver.find_element(By.CSS_SELECTOR, ".tree-view svg.tree")
            assert len(tree.find_elements(By.CSS_SELECTOR, ".tree-node")) == 60
            screenshot(driver, "dashboard-tree")
            before = [float(v) for v in tree.get_dom_attribute("viewBox").split()]
            driver.find_element(By.XPATH, "//button[text()='zoom in']").click()
            zoomed = [float(v) for v in tree.get_dom_attribute("viewBox").split()]
            assert zoomed[2] < before[2] * 0.8
            ActionChains(driver).move_to_element_with_offset(tree, 5, 5).click_and_hold().move_by_offset(120, 40) \
                .release().perform()
            dragged = [float(v) for v in tree.get_dom_attribute("viewBox").split()]
            assert dragged[0] < zoomed[0] and dragged[2] == zoomed[2]  # moved right: the view's left edge went left
            for page in (base, f"{base}/nodes/{attacks}", f"{base}/compare?a=initial&b={attacks}",
                         f"{base}/nodes/{summary['hostile']['error']}"):
                driver.get(page)
                assert driver.execute_script("return window.__pwned") is None, page
                assert js_errors(driver) == [], page
            driver.get(f"{base}/nodes/{attacks}")
            assert "<script>window.__pwned=1</script>" in driver.find_element(By.ID, "patch").text
            screenshot(driver, "dashboard-hostile-node")


def test_pick_runs_by_tag_tick_them_and_compare_their_progress(tmp_path):
    """The list of runs in a real browser: filter by a (hostile) tag, tick two runs, compare: one
    line and one band per run, and none of the names or tags runs as script."""
    from selenium.webdriver.common.by import By

    from support.dashboard import serving
    from support.synthetic_run import ATTACKS, make_run

    root = tmp_path / "runs"
    make_run(root / "baseline", nodes=20, seed=2, name="baseline " + ATTACKS["svg"], tags=["lr-sweep", ATTACKS["img"]])
    make_run(root / "higher-lr", nodes=16, seed=3, name="lr x2", tags=["lr-sweep"])
    make_run(root / "unrelated", nodes=6, seed=4, name=ATTACKS["script"], tags=[ATTACKS["javascript_url"]])
    with serving(root) as port, open_browser() as driver:
        driver.get(f"http://127.0.0.1:{port}/")
        assert len(driver.find_elements(By.CSS_SELECTOR, "tr.run")) == 3
        driver.find_element(By.XPATH, "//p[@class='tag-filter']/a[text()='lr-sweep']").click()
        wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, "tr.run")) == 2, 10, "the runs tagged lr-sweep")
        assert "baseline " + ATTACKS["svg"] in driver.find_element(By.CSS_SELECTOR, "table.runs").text
        for box in driver.find_elements(By.CSS_SELECTOR, "tr.run input[type=checkbox]"):
            box.click()
        driver.find_element(By.ID, "compare-runs").click()
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ".compare-runs svg"), 10, "the comparison")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Compare 2 runs"
        lines = driver.find_elements(By.CSS_SELECTOR, ".compare-runs polyline.series")
        bands = driver.find_elements(By.CSS_SELECTOR, ".compare-runs polygon.band")
        assert len(lines) == len(bands) == 2
        assert all(b.size["height"] > 0 for b in bands)  # drawn, not collapsed to a line
        rows = driver.find_elements(By.CSS_SELECTOR, "table.compared tr[data-run]")
        assert [r.get_attribute("data-run") for r in rows] == ["baseline", "higher-lr"]
        assert all("[" in r.find_element(By.CSS_SELECTOR, "td.best").text for r in rows)  # best with interval
        screenshot(driver, "dashboard-compare-runs")
        for page in ("/", "/?tag=" + ATTACKS["javascript_url"], "/compare?run=unrelated&run=baseline"):
            driver.get(f"http://127.0.0.1:{port}{page}")
            assert driver.execute_script("return window.__pwned") is None, page
        assert js_errors(driver) == []
