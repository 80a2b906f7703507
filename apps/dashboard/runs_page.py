"""Runs side by side: their best score by generation (each with a band), their best nodes and cost.

A run's band is the 95% interval of the node that is its best so far at each generation (the
interval its evaluation recorded). When two or more replicates of one group (GROUP/seed-N) are
compared, the group also gets a line of its own: the mean over its replicates of the best score
so far, with a bootstrap band over replicates (search.stats.bootstrap_band, as apps.analyze
draws them), up to the last generation all of them reached.
"""

from __future__ import annotations

from apps.dashboard import pieces
from apps.dashboard.markup import Markup, h, join, url
from apps.dashboard.pages import page
from apps.dashboard.reader import RunData
from apps.dashboard.svg import line_chart
from search.stats import bootstrap_band

MAX_COMPARED = 20  # runs on one comparison (the rest of a longer query is left out)


def compare_runs(runs: list[tuple[str, RunData]], version: str) -> str:
    if not runs:
        body = h("h1", {}, "Compare runs") + h("p", {"class": "empty"}, "No run chosen: tick runs on ",
                                                 h("a", {"href": "/"}, "the list of runs"), " and compare them.")
        return page("compare runs", body, [("runs", "/"), ("compare", None)], url("live"), version)
    series, bands, unscored = {}, {}, []
    for name, data in runs:
        line, band = run_curve(data)
        label = f"{name} ({data.title})" if data.title else name
        series[label], bands[label] = line, band
        if not line:
            unscored.append(name)
    for group, curves in groups_of(runs).items():
        line, band = group_curve(curves)
        label = f"group {group}: mean of {len(curves)} replicates"
        series[label], bands[label] = line, band
    body = join([
        h("h1", {}, f"Compare {len(runs)} runs"),
        h("h2", {}, "Best score so far, by generation"),
        h("p", {"class": "note"}, "Shaded: the 95% interval of each run's best node so far (as its evaluation "
                                  "recorded it), or, for a group of replicates, a bootstrap interval of their mean "
                                  "over replicates. Scores are the ones each run selects on."),
        h("div", {"class": "chart-box compare-runs"}, line_chart(series, "generation", "best score so far",
                                                                 bands=bands)),
        h("p", {"class": "note", "id": "unscored"}, "Nothing to draw of ", ", ".join(unscored),
          ": no node that can be a parent has a score yet.") if unscored else "",
        h("h2", {}, "Runs"), runs_table(runs)])
    return page("compare runs", body, [("runs", "/"), ("compare", None)], url("live"), version)


def run_curve(data: RunData) -> tuple[list[tuple[float, float]], list[tuple[float, float, float]]]:
    """The run's best score so far by generation, and where its best node has an interval, the band."""
    line, band = [], []
    for generation, node in data.best_so_far():
        line.append((generation, data.score(node)))
        interval = data.interval(node)
        if interval is not None:
            band.append((generation, *interval))
    return line, band


def groups_of(runs: list[tuple[str, RunData]]) -> dict[str, list[list[float]]]:
    """Per group with two or more of its replicates compared: each replicate's curve of best scores."""
    found: dict[str, list[list[float]]] = {}
    for name, data in runs:
        group, sep, _ = name.rpartition("/")
        line = run_curve(data)[0]
        if sep and line and line[0][0] == 0:  # scored from generation 0 (the initial node), so aligned
            found.setdefault(group, []).append([score for _, score in line])
    return {g: curves for g, curves in found.items() if len(curves) > 1}


def group_curve(curves: list[list[float]]) -> tuple[list[tuple[float, float]], list[tuple[float, float, float]]]:
    """Mean and bootstrap band over replicates, up to the shortest replicate's last generation."""
    last = min(len(c) for c in curves)
    estimates = bootstrap_band([c[:last] for c in curves])
    return ([(g, e.mean) for g, e in enumerate(estimates)], [(g, e.low, e.high) for g, e in enumerate(estimates)])


def runs_table(runs: list[tuple[str, RunData]]) -> Markup:
    head = h("tr", {}, join(h("th", {}, c) for c in ("run", "name", "tags", "domains", "status", "nodes",
                                                      "generations", "best [95% interval]", "cost")))
    rows = []
    for name, data in runs:
        generations = max((n.generation for n in data.nodes.values()), default=0)
        rows.append(h("tr", {"data-run": name}, h("td", {}, h("a", {"href": url("runs", name)}, name)),
                      h("td", {}, data.title), h("td", {}, pieces.tag_chips(data.tags, lambda t: url(tag=t))),
                      h("td", {}, ", ".join(data.domains)), h("td", {}, data.status),
                      h("td", {"class": "num"}, len(data.nodes)), h("td", {"class": "num"}, generations),
                      h("td", {"class": "best"}, pieces.best_cell(data)),
                      h("td", {"class": "num"}, pieces.fmt_cost(data.cost()))))
    return h("table", {"class": "runs compared"}, head, join(rows))
