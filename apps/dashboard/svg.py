"""Pictures of a run as inline SVG: the archive tree and line charts. Pure functions of the data,
shared by the dashboard's pages and the static report.html."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from apps.dashboard.markup import Markup, h, join

X_STEP, Y_STEP, RADIUS, MARGIN = 26, 64, 9, 30
LABEL_ROOM = 12  # below the lowest dots, for their labels
# A tree drawn to fit its frame (tree_svg fit=True): its dots shrink to MIN_RADIUS where its leaves would crowd
# FIT_WIDTH pixels (report.html's frame in a 1,400 px window), and it is at most FIT_HEIGHT pixels tall.
FIT_WIDTH, FIT_HEIGHT, MIN_RADIUS = 1300, 800, 3
FIT_X_STEP = 48  # leaves this far apart where the frame has room: a 4-character label clears its neighbours'
LABEL_ALL = 300  # trees up to this size have every node's id written under it (hover tells it on bigger ones)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def nice_ticks(low: float, high: float, max_ticks: int = 6, *, integer: bool = False) -> list[float]:
    """Evenly spaced round values, 1, 2 or 5 times a power of ten apart, the first at or below `low` and
    the last at or above `high`, at most `max_ticks` of them (at least 3: a range across zero needs them):
    an axis drawn from the first to the last reads at a glance. With `integer`, no step below 1 (generations,
    counts)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"axis bounds must be finite numbers, not {low!r} and {high!r}")
    low, high = min(low, high), max(low, high)
    if high == low:
        high = low + 1
    max_ticks = max(max_ticks, 3)
    power = 10.0 ** math.floor(math.log10((high - low) / (max_ticks - 1)))
    while True:
        for multiple in (1, 2, 5):
            step = multiple * power
            if integer and step < 1:
                continue
            # a hair of slack: 0.3 / 0.1 is 2.9999999999999996, and 0.3 is a tick of step 0.1
            first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
            if last - first < max_ticks:
                digits = max(0, -math.floor(math.log10(step)))
                return [round(i * step, digits) + 0.0 for i in range(first, last + 1)]  # + 0.0: no -0.0
        power *= 10


def score_range(scores: Iterable[float | None]) -> tuple[float, float]:
    """The range colours are scaled to: the lowest and highest of `scores` (None left out), so that
    a run whose scores all lie between 0.3 and 0.55 still shows which are better; 0 to 1 when fewer
    than two differ."""
    found = [s for s in scores if s is not None]
    low, high = min(found, default=0.0), max(found, default=1.0)
    return (low, high) if high > low else (0.0, 1.0)


def score_colour(score: float | None, scale: tuple[float, float] = (0.0, 1.0)) -> str:
    """Red (the scale's low end) through yellow to green (its high end); grey when there is no score."""
    if score is None:
        return "#d0d0d0"
    low, high = scale
    score = min(max((score - low) / (high - low), 0.0), 1.0)
    return f"hsl({round(120 * score)},65%,{round(55 - 10 * score)}%)"


@dataclass
class TreeNode:
    node_id: str
    parent: str | None
    generation: int
    status: str  # a node status, or "in_flight"
    score: float | None
    label: str  # the tooltip's text
    other_parent: str | None = None  # a merge's second parent, drawn as a dotted edge (the layout follows `parent`)


def layout(nodes: list[TreeNode]) -> dict[str, tuple[float, float]]:
    """(x, y) of each node: depth down, leaves side by side in the order of their generations,
    a parent centred over its children. Iterative: a lineage can be a thousand deep."""
    ids = {n.node_id for n in nodes}
    children: dict[str | None, list[TreeNode]] = {}
    for n in sorted(nodes, key=lambda n: (n.generation, n.node_id)):
        children.setdefault(n.parent if n.parent in ids else None, []).append(n)
    where: dict[str, tuple[float, float]] = {}
    next_leaf = 0
    stack = [(n, 0, False) for n in reversed(children.get(None, []))]
    while stack:
        node, depth, expanded = stack.pop()
        kids = children.get(node.node_id, [])
        if not kids:
            where[node.node_id] = (next_leaf, depth)
            next_leaf += 1
        elif expanded:
            where[node.node_id] = ((where[kids[0].node_id][0] + where[kids[-1].node_id][0]) / 2, depth)
        else:
            stack.append((node, depth, True))
            stack.extend((kid, depth + 1, False) for kid in reversed(kids))
    return where


def tree_svg(nodes: list[TreeNode], best_line: list[str], href: Callable[[str], str] | None = None, *,
             fit: bool = False) -> Markup:
    """The archive as a tree: colour by score (scaled to score_range of the nodes), a ring for each status
    that is not ok, dashes for a generation in flight, the best node's lineage drawn thick. `href(node_id)`
    links each node. Drawn in a viewBox for the dashboard's script to pan and zoom, or with `fit` for a page
    without script, to fit its frame (see `fitted`)."""
    if not nodes:
        return h("p", {"class": "empty"}, "No node yet.")
    where = layout(nodes)
    if fit:
        places, width, height, radius = fitted(where)
    else:
        places, radius = {node_id: _at(position) for node_id, position in where.items()}, RADIUS
        width = max(x for x, _ in where.values()) * X_STEP + 2 * MARGIN
        height = max(y for _, y in where.values()) * Y_STEP + 2 * MARGIN + LABEL_ROOM
    unit = "%" if fit else ""
    on_best = set(best_line)
    scale = score_range(n.score for n in nodes)

    def labelled(n: TreeNode) -> bool:  # a label is text to lay out: on a big tree, the nodes that matter
        return len(nodes) <= LABEL_ALL or n.node_id in on_best or n.status == "in_flight"

    best = best_line[0] if best_line else None
    edges, circles = [], []
    for n in nodes:
        x, y = places[n.node_id]
        if n.parent in where:
            px, py = places[n.parent]
            mid = (py + y) / 2
            edges.append(h("path", {"d": f"M{px:g},{py:g}C{px:g},{mid:g} {x:g},{mid:g} {x:g},{y:g}",
                                    "class": "edge best" if n.node_id in on_best and n.parent in on_best
                                    else "edge"}))
        if n.other_parent in where:
            ox, oy = places[n.other_parent]
            edges.append(h("path", {"d": f"M{ox:g},{oy:g}L{x:g},{y:g}", "class": "edge merge"}))
        shape = [h("title", {}, n.label),
                 h("circle", {"cx": f"{x:g}{unit}", "cy": f"{y:g}{unit}", "r": f"{radius + 3 * (n.node_id == best):g}",
                              "fill": score_colour(n.score, scale), "class": f"node-dot status-{n.status}"}),
                 h("text", {"x": f"{x:g}{unit}", "y": f"{y:g}{unit}", "dy": f"{radius + 12:g}",
                            "class": "node-label"}, n.node_id)
                 if labelled(n) else ""]
        attrs = {"class": "tree-node" + " on-best" * (n.node_id in on_best), "data-node": n.node_id}
        if href is not None and n.status != "in_flight":
            circles.append(h("a", {**attrs, "href": href(n.node_id)}, *shape))
        else:
            circles.append(h("g", attrs, *shape))
    about = {"xmlns": "http://www.w3.org/2000/svg", "role": "img", "aria-label": f"archive tree of {len(nodes)} nodes"}
    if fit:  # the edges in an inner drawing stretched as the percent are (CSS keeps their strokes unscaled)
        return h("svg", {"class": "tree fitted", "width": f"{width:g}", "height": f"{height:g}", **about},
                 h("svg", {"class": "edges", "viewBox": "0 0 100 100", "preserveAspectRatio": "none"}, join(edges)),
                 h("g", {"class": "nodes"}, join(circles)))
    return h("svg", {"class": "tree", "viewBox": f"0 0 {width:g} {height:g}", "data-width": f"{width:g}",
                     "data-height": f"{height:g}", **about},
             h("g", {"class": "edges"}, join(edges)), h("g", {"class": "nodes"}, join(circles)))


def fitted(where: dict[str, tuple[float, float]]) -> tuple[dict[str, tuple[float, float]], float, float, float]:
    """A layout drawn to fit its frame on a page without script: each node's place in percent of the drawing's
    width and height (so the layout, not the glyphs, shrinks with the frame: CSS makes the drawing no wider
    than its frame, and its dots and labels keep their pixel size), the drawing's width and height in pixels
    (margins included; at most FIT_HEIGHT tall: a deep lineage is drawn closer, not taller) and a dot's
    radius, smaller where a wide tree would crowd a frame of FIT_WIDTH."""
    wide, deep = max(x for x, _ in where.values()), max(y for _, y in where.values())
    inner = min(deep * Y_STEP, FIT_HEIGHT - 2 * MARGIN - LABEL_ROOM)
    spacing = min(FIT_WIDTH / (wide + 1), inner / deep if deep else Y_STEP)
    radius = min(RADIUS, max(MIN_RADIUS, spacing / 2 - 1))
    places = {node_id: (100 * x / wide if wide else 50.0, 100 * y / deep if deep else 0.0)
              for node_id, (x, y) in where.items()}
    return places, wide * FIT_X_STEP + 2 * MARGIN, inner + 2 * MARGIN + LABEL_ROOM, radius


def _at(position: tuple[float, float]) -> tuple[float, float]:
    return MARGIN + position[0] * X_STEP, MARGIN + position[1] * Y_STEP


def line_chart(series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, *,
               dots: dict[str, list[tuple[float, float]]] | None = None, width: int = 640, height: int = 260,
               y_range: tuple[float, float] | None = None,
               bands: dict[str, list[tuple[float, float, float]]] | None = None) -> Markup:
    """Lines (and dots) on shared axes, with a legend; every value a plain number. `bands` shades,
    in a line's colour, the area between its (x, low, high) points."""
    points = [p for line in series.values() for p in line] + [p for d in (dots or {}).values() for p in d] + \
        [(x, v) for band in (bands or {}).values() for x, low, high in band for v in (low, high)]
    if not points:
        return h("p", {"class": "empty"}, "Nothing to draw yet.")
    left, right, top, bottom = 56, 16, 12, 40
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_ticks = nice_ticks(min(xs), max(xs), 6, integer=all(float(x).is_integer() for x in xs))
    x0, x1 = x_ticks[0], x_ticks[-1]
    if y_range:
        y0, y1 = y_range[0], max(y_range[1], y_range[0] + 1e-9)
        y_ticks = [t for t in nice_ticks(y0, y1, 6) if y0 <= t <= y1]
    else:
        y_ticks = nice_ticks(min(0.0, min(ys)), max(ys), 6)
        y0, y1 = y_ticks[0], y_ticks[-1]

    def at(x: float, y: float) -> str:
        px = left + (x - x0) / (x1 - x0) * (width - left - right)
        py = top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom)
        return f"{px:.1f},{py:.1f}"

    parts = [h("line", {"x1": left, "y1": height - bottom, "x2": width - right, "y2": height - bottom,
                        "class": "axis"}),
             h("line", {"x1": left, "y1": top, "x2": left, "y2": height - bottom, "class": "axis"})]
    for yv, text in zip(y_ticks, tick_labels(y_ticks)):
        _, py = at(x0, yv).split(",")
        parts.append(h("text", {"x": left - 6, "y": py, "class": "tick y"}, text))
    for xv, text in zip(x_ticks, tick_labels(x_ticks)):
        px, _ = at(xv, y0).split(",")
        parts.append(h("text", {"x": px, "y": height - bottom + 16, "class": "tick x"}, text))
    parts.append(h("text", {"x": (left + width - right) / 2, "y": height - 6, "class": "axis-label"}, x_label))
    parts.append(h("text", {"x": 12, "y": top + (height - top - bottom) / 2, "class": "axis-label y",
                            "transform": f"rotate(-90 12 {top + (height - top - bottom) / 2:.1f})"}, y_label))
    names: list[str] = list(dict.fromkeys([*series, *(dots or {})]))
    legend = []
    for i, name in enumerate(names):
        parts += _marks(name, PALETTE[i % len(PALETTE)], series.get(name, []), (dots or {}).get(name, []),
                        (bands or {}).get(name), at)
        legend.append(h("li", {}, h("span", {"class": f"swatch c{i % len(PALETTE)}"}), name))
    return h("figure", {"class": "chart"},
             h("svg", {"viewBox": f"0 0 {width} {height}", "xmlns": "http://www.w3.org/2000/svg", "role": "img",
                       "aria-label": y_label}, join(parts)),
             h("ul", {"class": "legend"}, join(legend)))


def _marks(name: str, colour: str, line: list[tuple[float, float]], dots: list[tuple[float, float]],
           band: list[tuple[float, float, float]] | None, at: Callable[[float, float], str]) -> list[Markup]:
    """One series of a line chart: its band, its line (a mark for a line of one point) and its dots; `at` puts a
    value on the chart ("x,y")."""
    parts = []
    if band and len({x for x, _, _ in band}) == 1:  # one generation: an area of no width, drawn as a bar
        x, low, high = band[0]
        (top_x, top_y), (low_x, low_y) = at(x, high).split(","), at(x, low).split(",")
        parts.append(h("line", {"x1": top_x, "y1": top_y, "x2": low_x, "y2": low_y, "stroke": colour,
                                "class": "band-bar", "data-series": name}))
    elif band:
        outline = [at(x, high) for x, _, high in band] + [at(x, low) for x, low, _ in reversed(band)]
        parts.append(h("polygon", {"points": " ".join(outline), "fill": colour, "class": "band", "data-series": name}))
    if line:
        parts.append(h("polyline", {"points": " ".join(at(x, y) for x, y in line), "stroke": colour,
                                    "class": "series", "data-series": name}))
    if len({x for x, _ in line}) == 1:  # a line of one point draws nothing: a mark instead
        cx, cy = at(*line[-1]).split(",")
        parts.append(h("circle", {"cx": cx, "cy": cy, "r": 4, "fill": colour, "class": "point", "data-series": name}))
    for x, y in dots:
        cx, cy = at(x, y).split(",")
        parts.append(h("circle", {"cx": cx, "cy": cy, "r": 2.5, "fill": colour, "class": "dot"}))
    return parts


def tick_labels(ticks: list[float]) -> list[str]:
    """Ticks as text, all with the decimals the finest of them needs (0.0, 0.5, 1.0)."""
    decimals = max((len(f"{t:.10f}".rstrip("0").partition(".")[2]) for t in ticks), default=0)
    return [f"{t:,.{decimals}f}" for t in ticks]
