"""Every page of the dashboard in a real headless Chromium, for two runs a researcher opens the next
morning (issue 31): a quick run (the loop itself with --preset quick, on the fake provider, its meta
agent scripted to make failing tool calls before its edit) and a 40-node synthetic run with two
generations in flight. Each page is checked for what it should tell at a glance: the compare form
offers a node and its parent, axis ticks are round, the tree's colours span the scores shown and its
legend says so, intervals read as the console writes them, the comparison and the transcript open
on a summary, and no page logs a script error. Screenshots go to tests/artifacts/ (docs/dashboard.png
is dashboard-forty-run.png)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

# `driver`: one browser for the module, a fixture its tests name.
from support.browser import chromium_missing, driver, js_errors, screenshot  # noqa: F401
from support.cli import FAST_CONFIG, run_loop
from support.dashboard import serving
from support.scripted_loop import IMPROVE, responder
from support.synthetic_run import make_run

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))]

# Generation 1's meta agent fails twice (a shell command, an editor view) before its improving edit;
# generation 2's fails once and stops, changing nothing.
FAILING = [{"tool_name": "bash", "tool_input": {"command": "ls /no/such/folder"}},
           {"tool_name": "editor", "tool_input": {"command": "view", "path": "/workspace/no_such_file.py"}}]
INTERVAL = re.compile(r"(\d+\.\d{3}) (\[\d+\.\d{3}, \d+\.\d{3}\]) n=(\d+)")


@pytest.fixture(scope="module")
def served(tmp_path_factory, fake_openai_session):
    """A dashboard over a runs folder holding `quick` and `forty`: (base URL, runs folder, forty's summary)."""
    tmp = tmp_path_factory.mktemp("pages")
    config = tmp / "quick.yaml"
    config.write_text(FAST_CONFIG)
    fake_openai_session.reset()
    fake_openai_session.set_responder(responder({1: [*FAILING, IMPROVE], 2: FAILING[:1]}, []))
    done = run_loop(tmp, fake_openai_session, "--preset", "quick", config=config, timeout=900)
    fake_openai_session.reset()
    assert done.returncode == 0, done.stderr[-3000:]
    root = tmp / "out"
    (root / "run").rename(root / "quick")
    forty = make_run(root / "forty", nodes=40, seed=3, in_flight=2)
    with serving(root) as port:
        yield f"http://127.0.0.1:{port}", root, forty


def read(root: Path, name: str):
    from apps.dashboard.reader import RunReader

    return RunReader(root / name, name).read()


def round_step(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 5, 10))


def assert_round_ticks(driver, page: str) -> int:
    """Every chart's ticks on the page: evenly spaced round values, at most six an axis; returns the charts seen."""
    from selenium.webdriver.common.by import By

    charts = driver.find_elements(By.CSS_SELECTOR, "figure.chart svg")
    for chart in charts:
        for axis in ("x", "y"):
            values = [float(t.text.replace(",", "")) for t in chart.find_elements(By.CSS_SELECTOR, f"text.tick.{axis}")]
            assert 2 <= len(values) <= 6, (page, axis, values)
            steps = [b - a for a, b in zip(values, values[1:])]
            assert all(math.isclose(s, steps[0], rel_tol=1e-6) for s in steps) and round_step(steps[0]), \
                (page, axis, values)
    return len(charts)


def assert_console_intervals(cells: list[str], nodes: dict, page: str) -> int:
    """Each `0.400 [0.168, 0.687] n=10` in the table cells is written as the console writes that node's
    score (Node.scores_text); returns how many were seen. The node's id is the row's first cell."""
    seen = 0
    for row in cells:
        node_id, _, rest = row.partition(" ")
        node_id = node_id.rstrip("★")
        for score, band, rows in INTERVAL.findall(rest):
            assert f"={score} {band} n={rows}" in nodes[node_id].scores_text(), (page, row)
            seen += 1
    return seen


def scroll_to(driver, element_id: str) -> None:
    """The element at the top of the window, below the page's sticky header."""
    driver.execute_script(f"document.getElementById('{element_id}').scrollIntoView(); scrollBy(0, -60)")


def check_run_page(driver, base: str, name: str, data) -> tuple[str, str]:
    """The run page: compare form, colours and their legend, ticks, the nodes table's intervals; returns the
    form's pair."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(f"{base}/runs/{name}")
    a = Select(driver.find_element(By.ID, "compare-a")).first_selected_option.get_attribute("value")
    b = Select(driver.find_element(By.ID, "compare-b")).first_selected_option.get_attribute("value")
    assert a != b and data.nodes[b].parent == a, (name, a, b)
    # Colours span the scores in the tree, the key names the ends.
    scores = [s for n in data.nodes.values() if (s := data.score(n)) is not None]
    key = driver.find_element(By.CSS_SELECTOR, ".colour-key")
    assert (key.get_attribute("data-low"), key.get_attribute("data-high")) == (f"{min(scores):.3f}",
                                                                               f"{max(scores):.3f}")
    fills = {e.get_attribute("data-node"): e.find_element(By.CSS_SELECTOR, "circle").get_attribute("fill")
             for e in driver.find_elements(By.CSS_SELECTOR, ".tree-node")}
    lowest = min((n for n in data.nodes.values() if data.score(n) is not None), key=data.score)
    highest = max((n for n in data.nodes.values() if data.score(n) is not None), key=data.score)
    assert fills[lowest.node_id].startswith("hsl(0,") and fills[highest.node_id].startswith("hsl(120,")
    assert assert_round_ticks(driver, name) >= 2  # progress and cost
    rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "table.nodes tr[class^=status-]")]
    assert assert_console_intervals(rows, data.nodes, name) > 0
    assert js_errors(driver) == []
    return a, b


def check_node_page(driver, base: str, name: str, node) -> int:
    """A node page: the scores' intervals, the transcript's summary before it with each failure linked to
    its turn; returns the failures listed."""
    from selenium.webdriver.common.by import By

    from search.stats import interval_text

    driver.get(f"{base}/runs/{name}/nodes/{node.node_id}")
    for row in driver.find_elements(By.CSS_SELECTOR, "table.scores tr")[1:]:
        domain, split, _, band = (c.text for c in row.find_elements(By.TAG_NAME, "td")[:4])
        interval = node.intervals.get(domain, {}).get(split)
        assert band == (interval_text(*interval) if interval else "")
    assert js_errors(driver) == []
    if not driver.find_elements(By.ID, "transcript"):
        return 0
    summary = driver.find_element(By.ID, "transcript-summary")
    text = driver.find_element(By.ID, "transcript")
    assert summary.location["y"] < text.location["y"]
    assert re.match(r"\d+ model repl(y|ies)", summary.text)
    links = summary.find_elements(By.CSS_SELECTOR, ".failures a")
    failed = text.find_elements(By.CSS_SELECTOR, ".turn.failed")
    assert len(links) == len(failed)
    if links:
        target = links[0].get_attribute("href").rsplit("#", 1)[1]
        links[0].click()
        assert driver.execute_script("return location.hash") == f"#{target}"
        top = driver.execute_script(f"return document.getElementById('{target}').getBoundingClientRect().top")
        assert 0 <= top < driver.execute_script("return innerHeight")  # scrolled to the failing call
    return len(links)


def check_compare_page(driver, name: str) -> None:
    """The comparison the run page's form opens: its summary first, consistent with the lists below."""
    from selenium.webdriver.common.by import By

    summary = driver.find_element(By.ID, "compare-summary")
    changed = driver.find_elements(By.CSS_SELECTOR, ".changed-summary")
    assert changed and summary.location["y"] < changed[0].location["y"]
    tests = {tuple(c.text for c in r.find_elements(By.TAG_NAME, "td")[:2]):
             r.find_element(By.CLASS_NAME, "p-value").text
             for r in driver.find_elements(By.CSS_SELECTOR, "table.paired-tests tr.paired")}
    for row in summary.find_elements(By.CSS_SELECTOR, "tr.outcome"):
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        common, better, worse, same = map(int, cells[2:6])
        assert better + worse + same == common and cells[8] == tests[(cells[0], cells[1])], (name, cells)
        assert any(f"{cells[0]} {cells[1]}: {common} rows in common, {cells[6]} changed: {better} better, "
                   f"{worse} worse" in c.text for c in changed)
    assert js_errors(driver) == []


def test_the_quick_run_page_by_page(served, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, root, _ = served
    data = read(root, "quick")
    driver.get(base + "/")
    assert {r.get_attribute("data-run") for r in driver.find_elements(By.CSS_SELECTOR, "tr.run")} == {"quick",
                                                                                                    "forty"}
    a, b = check_run_page(driver, base, "quick", data)
    assert (a, b) == ("initial", "1")  # the best node (its edit scores 1.0) and its parent
    screenshot(driver, "dashboard-quick-run")
    driver.get(f"{base}/runs/quick/nodes")
    assert_console_intervals([r.text for r in driver.find_elements(By.CSS_SELECTOR, "table.nodes tr[class^=status-]")],
                             data.nodes, "quick nodes")
    failures = {n: check_node_page(driver, base, "quick", data.nodes[n]) for n in data.nodes}
    assert failures == {"initial": 0, "1": 2, "2": 1}  # as scripted: the summary counts the real loop's failures
    driver.get(f"{base}/runs/quick/nodes/1")
    summary = driver.find_element(By.ID, "transcript-summary").text
    assert "; 3 tool calls (editor 2, bash 1); 2 of them failed." in summary and "exit status 2" in summary
    scroll_to(driver, "transcript-summary")
    screenshot(driver, "dashboard-quick-transcript")
    driver.get(f"{base}/runs/quick")
    driver.find_element(By.ID, "compare-go").click()
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.ID, "compare-summary"))
    check_compare_page(driver, "quick")
    screenshot(driver, "dashboard-quick-compare")


def test_a_forty_node_run_page_by_page(served, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, root, forty = served
    data = read(root, "forty")
    a, b = check_run_page(driver, base, "forty", data)
    assert b == forty["best"] and a == data.nodes[b].parent
    screenshot(driver, "dashboard-forty-run")
    driver.execute_script("document.querySelector('section.charts').scrollIntoView()")
    screenshot(driver, "dashboard-forty-charts")
    driver.get(f"{base}/runs/forty/nodes")
    rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "table.nodes tr[class^=status-]")]
    assert len(rows) == 40 and assert_console_intervals(rows, data.nodes, "forty nodes") >= 40
    statuses = forty["statuses"]
    picked = {forty["best"], "initial", *(n for n, s in statuses.items() if s in ("meta_failed", "no_change"))}
    for node_id in sorted(picked):
        check_node_page(driver, base, "forty", data.nodes[node_id])
    driver.get(f"{base}/runs/forty/nodes/{next(n for n, s in statuses.items() if s == 'meta_failed')}")
    summary = driver.find_element(By.ID, "transcript-summary")
    assert "1 failed model call" in summary.text  # the HTTP 529 that ended its meta agent
    scroll_to(driver, "transcript-summary")
    screenshot(driver, "dashboard-forty-transcript")
    for flight in forty["in_flight"]:
        driver.get(f"{base}/runs/forty/nodes/{flight}")
        assert "(in flight)" in driver.find_element(By.TAG_NAME, "h1").text and js_errors(driver) == []
    driver.get(f"{base}/runs/forty")
    driver.find_element(By.ID, "compare-go").click()
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.ID, "compare-summary"))
    check_compare_page(driver, "forty")
    screenshot(driver, "dashboard-forty-compare")
    driver.get(f"{base}/compare?run=quick&run=forty")
    assert assert_round_ticks(driver, "compare runs") == 1
    best = {r.get_attribute("data-run"): r.find_element(By.CSS_SELECTOR, "td.best").text
            for r in driver.find_elements(By.CSS_SELECTOR, "table.compared tr[data-run]")}
    from search.stats import interval_text

    for name in ("quick", "forty"):
        run = read(root, name)
        assert best[name].endswith(interval_text(*run.interval(run.best())))
    assert js_errors(driver) == []
    screenshot(driver, "dashboard-compare-two-runs")
