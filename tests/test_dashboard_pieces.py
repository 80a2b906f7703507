"""The dashboard's pure parts: axis ticks, colour scales, the compare form's default pair, summaries."""

from __future__ import annotations

import math

import pytest

from archive.dashboard.pieces import colour_key
from archive.dashboard.svg import TreeNode, line_chart, nice_ticks, score_colour, score_range, tick_labels, tree_svg


def _round(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m) for m in (1, 2, 5, 10))


@pytest.mark.parametrize("low, high", [(0, 9.25), (0, 0.135), (0.3, 0.55), (0, 1), (-0.05, 0.95), (0, 137),
                                       (1e-4, 3e-4), (2, 2), (0.168, 0.687), (0, 12345.6), (-3, -1)])
@pytest.mark.parametrize("max_ticks", [3, 5, 6, 11])
def test_nice_ticks_are_round_cover_the_range_and_are_few(low, high, max_ticks):
    ticks = nice_ticks(low, high, max_ticks)
    assert 2 <= len(ticks) <= max_ticks
    assert ticks[0] <= low and ticks[-1] >= high
    steps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1 and _round(steps.pop())
    step = ticks[1] - ticks[0]
    assert all(math.isclose(t / step, round(t / step), abs_tol=1e-9) for t in ticks)  # multiples of the step


def test_nice_ticks_examples_from_the_issue():
    assert nice_ticks(0, 9.25, 6) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0, 0.135, 6) == [0, 0.05, 0.1, 0.15]
    assert nice_ticks(0.3, 0.55, 6) == [0.3, 0.35, 0.4, 0.45, 0.5, 0.55]
    assert nice_ticks(0, 0.3, 4) == [0, 0.1, 0.2, 0.3]  # 0.3 / 0.1 is not quite 3 in floats
    assert all(str(t) != "-0.0" for t in nice_ticks(-1, 1, 3))
    assert nice_ticks(-0.05, 0.95, 2) == [-1, 0, 1]  # across zero, three is the fewest


def test_integer_ticks_never_step_below_one():
    assert nice_ticks(0, 3, 6, integer=True) == [0, 1, 2, 3]
    assert nice_ticks(0, 0, 6, integer=True) == [0, 1]
    assert nice_ticks(0, 40, 6, integer=True) == [0, 10, 20, 30, 40]


def test_nice_ticks_refuses_bounds_that_are_no_numbers():
    with pytest.raises(ValueError, match="finite"):
        nice_ticks(0, math.nan, 6)


def test_tick_labels_share_their_decimals():
    assert tick_labels([0, 0.5, 1]) == ["0.0", "0.5", "1.0"]
    assert tick_labels([0, 5000, 10000]) == ["0", "5,000", "10,000"]
    assert tick_labels([0.0001, 0.00015]) == ["0.00010", "0.00015"]


def test_line_chart_writes_round_ticks_for_awkward_data():
    chart = line_chart({"val": [(0, 0.168), (1, 0.31), (2, 0.687)]}, "generation", "score")
    assert ">0.0<" in chart and ">0.8<" in chart and "0.687<" not in chart
    assert 'class="tick x">1<' in chart and "0.5<" not in chart.split('class="tick x"', 1)[1].split("</svg>")[0]


def test_colours_spread_over_the_scores_shown():
    scale = score_range([0.3, None, 0.42, 0.55])
    assert scale == (0.3, 0.55)
    hues = [score_colour(v, scale).split(",")[0] for v in (0.3, 0.42, 0.55)]
    assert hues == ["hsl(0", "hsl(58", "hsl(120"]  # red, yellow, green: no longer one yellow for all three
    assert score_colour(0.9, scale) == score_colour(0.55, scale) and score_colour(None, scale) == "#d0d0d0"
    assert score_range([0.4, 0.4]) == score_range([None]) == (0.0, 1.0)  # nothing to spread: the absolute scale


def test_tree_and_its_key_use_one_scale():
    nodes = [TreeNode("0", None, 0, "ok", 0.3, "a"), TreeNode("1", "0", 1, "ok", 0.55, "b")]
    tree = tree_svg(nodes, ["1", "0"])
    assert 'fill="hsl(0,65%,55%)"' in tree and 'fill="hsl(120,65%,45%)"' in tree
    key = colour_key(score_range(n.score for n in nodes))
    assert 'data-low="0.300"' in key and 'data-high="0.550"' in key and "0.425" in key
    assert 'fill="hsl(0,65%,55%)"' in key and "lowest and highest" in key
    assert "lowest and highest" not in colour_key((0.0, 1.0))
