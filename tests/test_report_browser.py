"""report.html in a real headless Chromium, for the two runs a researcher opens the next morning (issue 31):
the quick run (the loop itself with --preset quick on the fake provider, whose models cost nothing and whose
meta agent changes nothing, as the local model's did: only the initial node is scored) and a 40-node
synthetic run. Each is checked where a new user stumbled: the tree inside its frame with dots and labels at a
readable size (also in a narrow window, where the layout shrinks and the glyphs do not), no interactive
wording in a file with no script, round axis ticks, generations on x, tokens when dollars are zero, the
initial node's real time, and intervals as the console writes them. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import json
import math
import re

import pytest

from apps.dashboard.pieces import fmt_seconds
from apps.report import write_report
from archive.store import Archive
from support.browser import chromium_missing, js_errors, open_browser, screenshot
from support.cli import FAST_CONFIG, run_loop
from support.scripted_loop import responder
from support.synthetic_run import make_run

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))]

# Every box of the tree, in the page's pixels: its frame, the drawing, each dot and each label.
BOXES = """
const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const svg = document.querySelector(".tree-frame svg.tree");
return {frame: box(document.querySelector(".tree-frame")), svg: box(svg),
        dots: [...svg.querySelectorAll("circle")].map(box), labels: [...svg.querySelectorAll("text")].map(box)};
"""
TICKS = """
return [...document.querySelectorAll("figure.chart")].map((chart) => ({
  label: [...chart.querySelectorAll(".axis-label")].map((e) => e.textContent),
  x: [...chart.querySelectorAll(".tick.x")].map((e) => e.textContent),
  y: [...chart.querySelectorAll(".tick.y")].map((e) => e.textContent)}));
"""


def inside(inner: list[float], outer: list[float], slack: float = 0.5) -> bool:
    return inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack and \
        inner[2] <= outer[2] + slack and inner[3] <= outer[3] + slack


def check_tree(driver) -> dict:
    """The tree fits its frame: the drawing, every dot and every label inside it; dots 6 to 30 px across,
    labels 8 to 16 px tall (the report once drew a 3-node tree's dots 120 px wide, its labels 45 px)."""
    boxes = driver.execute_script(BOXES)
    assert inside(boxes["svg"], boxes["frame"]), boxes
    for part in ("dots", "labels"):
        for found in boxes[part]:
            assert inside(found, boxes["frame"]), (part, found, boxes["frame"])
    assert boxes["dots"] and all(6 <= d[2] - d[0] <= 30 for d in boxes["dots"]), boxes["dots"]
    assert boxes["labels"] and all(8 <= t[3] - t[1] <= 16 for t in boxes["labels"]), boxes["labels"]
    return boxes


def check_static(driver) -> None:
    """No script, nothing it would need one for, no error."""
    text = driver.execute_script("return document.body.innerText").lower()
    assert not re.search(r"\b(drag|wheel|zoom|pan)\b", text), text[:400]
    assert driver.execute_script("return document.scripts.length") == 0
    assert js_errors(driver) == []


def round_ticks(texts: list[str]) -> bool:
    """Evenly spaced multiples of 1, 2 or 5 times a power of ten."""
    ticks = [float(t.replace(",", "")) for t in texts]
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    if len(ticks) < 2 or len(steps) != 1:
        return False
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m) for m in (1, 2, 5)) and \
        all(math.isclose(t / step, round(t / step), abs_tol=1e-6) for t in ticks)


def check_charts(driver) -> list[dict]:
    charts = driver.execute_script(TICKS)
    assert len(charts) == 2, charts  # progress and cost
    for chart in charts:
        assert round_ticks(chart["x"]) and round_ticks(chart["y"]), chart
    progress = charts[0]
    assert progress["label"][0] == "generation" and all(t.isdigit() for t in progress["x"]), progress
    return charts


def cells(driver, node_id: str) -> dict[str, str]:
    """The nodes table's row of `node_id`: heading -> the cell's text."""
    return driver.execute_script("""
        const table = document.querySelector("table.nodes");
        const heads = [...table.querySelectorAll("th")].map((e) => e.textContent);
        const row = [...table.querySelectorAll("tr")].find((r) => r.cells[0] && r.cells[0].textContent.split(" ")[0]
                                                             .replace("\u2605", "") === arguments[0]);
        return Object.fromEntries(heads.map((h, i) => [h, row.cells[i].textContent]));""", node_id)


def test_the_quick_runs_report(tmp_path, fake_openai):
    fake_openai.set_responder(responder({}, []))
    config = tmp_path / "quick.yaml"
    config.write_text(FAST_CONFIG)
    done = run_loop(tmp_path, fake_openai, "--preset", "quick", config=config, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "out" / "run"
    console = next(line for line in done.stdout.splitlines() if line.startswith("best node initial"))
    initial = json.loads((run / "nodes" / "initial" / "node.json").read_text())
    seconds = initial["seconds"]  # the initial node has no meta phase: its total is its check and evaluation
    assert seconds["total"] >= seconds.get("eval", 0) > 0, seconds

    with open_browser() as driver:
        driver.get((run / "report.html").as_uri())
        check_static(driver)
        boxes = check_tree(driver)
        assert len(boxes["dots"]) == 3 and boxes["svg"][2] - boxes["svg"][0] < 200  # a small tree stays small
        screenshot(driver, "report-quick")
        charts = check_charts(driver)
        assert charts[0]["x"] == ["0", "1", "2"]  # generations 0 to 2, though only generation 0 was scored
        assert "tokens" in charts[1]["label"][1] and "$0" in charts[1]["label"][1]  # the models cost nothing
        assert float(charts[1]["y"][-1].replace(",", "")) > 1000
        row = cells(driver, "initial")
        # The console's `imo_grading/train=0.400 [0.168, 0.687] n=10`, cell for cell.
        for domain, split, text in re.findall(r"(\w+)/(\w+)=(\S+ \[[^]]+\] n=\d+)", console):
            assert row[f"{domain} {split}"] == text, (row, console)
        assert row["time"] == fmt_seconds(seconds["total"]) and row["time"] != "0.0 s"
        driver.execute_script("document.querySelectorAll('figure.chart')[1].scrollIntoView()")  # cost, nodes
        screenshot(driver, "report-quick-charts")


def test_a_forty_node_runs_report_in_a_wide_and_a_narrow_window(tmp_path):
    summary = make_run(tmp_path / "run", nodes=40, seed=3)
    report = write_report(tmp_path / "run", tmp_path / "report.html")
    best = Archive(tmp_path / "run").nodes[summary["best"]]
    sizes = {}
    for width in (1400, 700):
        with open_browser(width=width) as driver:
            driver.get(report.as_uri())
            check_static(driver)
            boxes = check_tree(driver)
            assert len(boxes["dots"]) == 40
            sizes[width] = (boxes["svg"][2] - boxes["svg"][0], sorted({round(d[2] - d[0]) for d in boxes["dots"]}))
            check_charts(driver)
            row = cells(driver, best.node_id)
            for domain, split, found in best.evaluations():  # as Node.scores_text writes it on the console
                assert row[f"{domain} {split}"] == found.text(), row
            screenshot(driver, "report-forty" if width == 1400 else "report-forty-narrow")
    assert sizes[700][0] < sizes[1400][0] * 0.7  # the layout shrank with the window...
    assert sizes[700][1] == sizes[1400][1]  # ...and the dots did not
