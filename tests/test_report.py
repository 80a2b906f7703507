"""report.html's pieces without a browser: the tree drawn to fit its frame (positions scale, dots and labels
keep their pixel size), no interactive wording in the static file, round ticks on every chart, tokens on the
cost chart when every call was free, a node's time when the loop recorded no total, a bounded tree picture."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from apps.dashboard import pieces
from apps.dashboard.reader import RunReader
from apps.dashboard.svg import (
    FIT_HEIGHT,
    FIT_X_STEP,
    LABEL_ROOM,
    MARGIN,
    MIN_RADIUS,
    RADIUS,
    TreeNode,
    fitted,
    layout,
    tree_svg,
)
from apps.report import write_report
from archive.records import Node
from services.ledger import Call, Ledger
from support.synthetic_run import make_run

SVG = "{http://www.w3.org/2000/svg}"


def drawn(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))


def radii(svg: ET.Element) -> set[float]:
    return {float(c.get("r", "nan")) for c in svg.iter(f"{SVG}circle")}


def percents(svg: ET.Element, attribute: str) -> list[float]:
    values = [c.get(attribute, "") for c in svg.iter(f"{SVG}circle")]
    assert all(v.endswith("%") for v in values), values
    return [float(v[:-1]) for v in values]


def star(children: int) -> list[TreeNode]:
    return [TreeNode("initial", None, 0, "ok", 0.5, "root")] + \
        [TreeNode(str(g), "initial", g, "ok", g / children, f"node {g}") for g in range(1, children + 1)]


def chain(length: int) -> list[TreeNode]:
    return [TreeNode("initial", None, 0, "ok", 0.5, "root")] + \
        [TreeNode(str(g), "initial" if g == 1 else str(g - 1), g, "ok", 0.5, "") for g in range(1, length)]


def test_a_small_fitted_tree_is_drawn_at_its_natural_size_with_fixed_glyphs():
    svg = drawn(tree_svg(star(2), ["initial"], fit=True))
    assert svg.get("viewBox") is None and "fitted" in svg.get("class", "")  # nothing scales the glyphs
    assert float(svg.get("width", "0")) == FIT_X_STEP + 2 * MARGIN  # two leaves, one step apart
    assert float(svg.get("height", "0")) == 64 + 2 * MARGIN + LABEL_ROOM
    assert radii(svg) == {RADIUS, RADIUS + 3}  # the best node's dot is the bigger one
    assert sorted(percents(svg, "cx")) == [0, 50, 100] and sorted(percents(svg, "cy")) == [0, 100, 100]
    labels = list(svg.iter(f"{SVG}text"))
    assert [t.text for t in labels] == ["initial", "1", "2"] and {t.get("dy") for t in labels} == {"21"}
    edges = svg.find(f"{SVG}svg")  # stretched with the percent: the same 0-100 space
    assert edges is not None and edges.get("viewBox") == "0 0 100 100"
    assert edges.get("preserveAspectRatio") == "none" and len(list(edges.iter(f"{SVG}path"))) == 2


@pytest.mark.parametrize("nodes", [star(999), chain(1000)], ids=["999 leaves", "1000 deep"])
def test_a_big_fitted_tree_keeps_within_bounds_and_its_dots_stay_visible(nodes):
    svg = drawn(tree_svg(nodes, [], fit=True))
    assert float(svg.get("height", "0")) <= FIT_HEIGHT  # CSS caps the width at the frame's: see the browser test
    assert radii(svg) == {MIN_RADIUS}
    for axis in ("cx", "cy"):
        assert all(0 <= v <= 100 for v in percents(svg, axis))
    assert len(list(svg.iter(f"{SVG}text"))) == 0  # past LABEL_ALL nodes, only the best lineage is labelled


def test_fitted_scales_the_layout_not_the_sizes():
    where = layout(star(40))
    places, width, height, radius = fitted(where)
    assert radius == RADIUS and width == 39 * FIT_X_STEP + 2 * MARGIN
    assert places["initial"] == (50.0, 0.0) and places["1"] == (0.0, 100.0) and places["40"] == (100.0, 100.0)
    assert fitted({"alone": (0.0, 0.0)}) == ({"alone": (50.0, 0.0)}, 2 * MARGIN, 2 * MARGIN + LABEL_ROOM, RADIUS)
    deep = fitted(layout(chain(200)))
    assert deep[2] == FIT_HEIGHT and deep[3] == MIN_RADIUS


def test_the_dashboards_tree_is_unchanged_a_viewbox_in_pixels():
    svg = drawn(tree_svg(star(2), ["initial"]))
    assert svg.get("viewBox") == f"0 0 {26 + 2 * MARGIN} {64 + 2 * MARGIN + LABEL_ROOM}"  # leaves 26 px apart
    assert all(not c.get("cx", "").endswith("%") for c in svg.iter(f"{SVG}circle"))


def test_node_time_is_the_sum_of_its_phases_when_no_total_was_recorded():
    initial = Node("initial", None, 0, seconds={"check": 0.4, "eval": 107.9})
    child = Node("1", "initial", 1, seconds={"meta": 30.0, "eval": 50.0, "total": 81.5})
    assert pieces.node_seconds(initial) == pytest.approx(108.3) and pieces.node_seconds(child) == 81.5
    assert pieces.fmt_seconds(108.3) == "108 s" and pieces.fmt_seconds(0.95) == "0.9 s"
    assert pieces.node_seconds(Node("2", "initial", 2)) == 0


def test_the_cost_chart_shows_tokens_when_every_call_was_free(tmp_path):
    ledger = Ledger(tmp_path / "free" / "ledger.sqlite")
    for node, tokens in (("initial", 1200), ("1", 800)):
        ledger.record(Call("run", node, "task", "local/smollm2-135m", prompt_tokens=tokens, completion_tokens=34))
    chart = str(pieces.cost_chart(RunReader(tmp_path / "free")))
    assert "tokens (every call cost $0)" in chart and "dollars" not in chart
    assert ">2,000<" in chart  # the y axis reaches the 2,068 tokens booked

    paid = Ledger(tmp_path / "paid" / "ledger.sqlite")
    paid.record(Call("run", "initial", "task", "openai/gpt-4o-mini", prompt_tokens=1200, cost_usd=0.25))
    chart = str(pieces.cost_chart(RunReader(tmp_path / "paid")))
    assert "dollars spent" in chart and "tokens" not in chart


def _round_step(ticks: list[float]) -> bool:
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    if len(steps) != 1:
        return False
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m) for m in (1, 2, 5)) and \
        all(math.isclose(t / step, round(t / step), abs_tol=1e-6) for t in ticks)


@pytest.fixture(scope="module")
def report_of_40(tmp_path_factory) -> tuple[str, dict]:
    folder = tmp_path_factory.mktemp("run40")
    summary = make_run(folder / "run", nodes=40, seed=3)
    return write_report(folder / "run", folder / "report.html").read_text(), summary


def test_the_static_report_has_no_interactive_wording_and_a_fitted_tree(report_of_40):
    page, _ = report_of_40
    body = page.split("<body", 1)[1]
    words = re.sub(r"<[^>]+>", " ", body).lower()
    assert not re.search(r"\b(drag|wheel|zoom|pan)\b", words)
    assert 'class="tree fitted"' in body and 'class="tree-view"' not in body and "tabindex" not in body


def test_every_chart_of_the_report_has_round_ticks(report_of_40):
    page, _ = report_of_40
    charts = re.findall(r'<figure class="chart">.*?</figure>', page, re.S)
    assert len(charts) == 2  # progress and cost
    for chart in charts:
        for axis in ("x", "y"):
            ticks = [float(t.replace(",", "")) for t in re.findall(rf'class="tick {axis}"[^>]*>([^<]+)<', chart)]
            assert len(ticks) >= 2 and _round_step(ticks), (axis, ticks)
    progress_x = re.findall(r'class="tick x"[^>]*>([^<]+)<', charts[0])
    assert all(t.isdigit() for t in progress_x) and progress_x[-1] == "40"  # generations 0 to 39


def test_the_tree_picture_stays_a_page_in_size(tmp_path):
    from apps.plots import TREE_MAX_INCHES, write_plots
    from archive.store import Archive
    from domains.registry import get_domain

    summary = make_run(tmp_path / "run", nodes=40, seed=3)
    written = write_plots(Archive(tmp_path / "run"), [get_domain("imo_grading")], {"imo_grading": 100},
                          summary["best"], tmp_path)
    tree = next(p for p in written if p.name == "archive_tree.png").read_bytes()
    width, height = int.from_bytes(tree[16:20]), int.from_bytes(tree[20:24])  # the PNG's IHDR
    assert width <= TREE_MAX_INCHES[0] * 100 and height <= TREE_MAX_INCHES[1] * 100  # was 3,245 px wide
    assert width > 600 and height > 300


def test_a_run_stopped_before_its_initial_node_draws_no_picture_and_raises_nothing(tmp_path):
    from apps.plots import write_plots
    from archive.store import Archive
    from domains.registry import get_domain

    assert write_plots(Archive(tmp_path), [get_domain("imo_grading")], {"imo_grading": 100}, None,
                       tmp_path / "plots") == []
