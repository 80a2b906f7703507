"""What a row costs, on the dashboard and in report.html: the accuracy-cost front of a run (per domain, the
selection split's score against $ per row, archive/row_costs.py) as a chart and a table, and a node's cost
per row on each split. Every string shown comes from the run's records and goes through `markup.h`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from apps.dashboard.markup import Markup, h, join
from apps.dashboard.reader import RunData
from apps.dashboard.svg import line_chart
from archive.records import EVAL_KEY, Node
from archive.row_costs import (
    COST_FILE,
    MAX_COST_BYTES,
    FrontPoint,
    RowCost,
    Tally,
    front_of,
    node_tallies,
    per_row,
    usd_text,
)
from search.stats import interval_text
from services.errors import UserError
from services.fsutil import read_below
from services.user_files import parse_json

_HEAD = ("node", "gen", "score", "95% interval", "$ a row", "tokens in a row", "tokens out a row",
         "model seconds a row", "rows tallied", "on the front")


def tallies_of(run_path: Path) -> Callable[[str], Tally | None]:
    """What reads an evaluation's cost record of the run in `run_path` (archive/row_costs.py): None when it has
    none; a UserError naming it when it is not one the run wrote (a forged number, a link, a fifo, too big)."""
    def tally(key: str) -> Tally | None:
        if not EVAL_KEY.fullmatch(key):
            return None
        relative = f"evals/{key}/{COST_FILE}"
        try:
            data, more = read_below(run_path, relative, MAX_COST_BYTES)
            if more:
                raise ValueError(f"over {MAX_COST_BYTES} bytes")
            return Tally.from_dict(parse_json(data))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise UserError(f"{relative}: not a cost record the run wrote ({e})") from None
    return tally


def _amount(value: float | None, shown: str = "{:,.0f}") -> str:
    return "unknown" if value is None else shown.format(value)


def _cost_cells(cost: RowCost) -> Markup:
    cells = (usd_text(cost.usd), _amount(cost.prompt_tokens), _amount(cost.completion_tokens),
             _amount(cost.seconds, "{:.2f}"), str(cost.rows))
    return join(h("td", {"class": "num"}, c) for c in cells)


def front_table(points: list[FrontPoint], href: Callable[[str], str] | None) -> Markup:
    """Every costed node, cheapest first; those on the front marked (a node whose price is unknown is last)."""
    rows = []
    for p in points:
        name = h("a", {"href": href(p.node_id)}, p.node_id) if href else p.node_id
        rows.append(h("tr", {"class": "on-front" if p.on_front else ""}, h("td", {}, name),
                      h("td", {"class": "num"}, p.generation), h("td", {"class": "num"}, f"{p.score:.3f}"),
                      h("td", {"class": "num"}, interval_text(*p.interval) if p.interval else ""),
                      _cost_cells(p.cost), h("td", {}, "yes" if p.on_front else "")))
    return h("table", {"class": "front"}, h("tr", {}, join(h("th", {}, c) for c in _HEAD)), join(rows))


def front_chart(points: list[FrontPoint], split: str) -> Markup:
    """Each costed node as a dot at ($ a row, score), the front as a line through its nodes."""
    known = [p for p in points if p.cost.usd is not None]
    line = [(p.cost.usd, p.score) for p in known if p.on_front and p.cost.usd is not None]
    dots = [(p.cost.usd, p.score) for p in known if not p.on_front and p.cost.usd is not None]
    return line_chart({"the front": line}, "$ a row (the task agent's calls)", f"{split} score",
                      dots={"other nodes": dots} if dots else None)


def front(data: RunData, href: Callable[[str], str] | None = None) -> Markup:
    """Per domain: the front's chart and table, or why there is nothing to draw; problems met as a list."""
    parts = [h("p", {}, "The nodes that ended OK with a full evaluation, by the score the run selects on and what "
                        "a row costs: the mean price of the task agent's calls answered by the provider (from the "
                        "ledger), times the calls a row made. A node is on the front when no other is as good for "
                        "less. Model seconds are the summed latency of a row's calls, as if rows ran one at a "
                        "time.")]
    for domain in data.domains:
        split = data.selection_split(domain)
        points, problems = front_of(data.nodes.values(), domain, split, tallies_of(data.path))
        parts.append(h("h3", {}, f"{domain} ({split})"))
        if problems:
            parts.append(h("ul", {"class": "problems"}, join(h("li", {}, p) for p in problems)))
        if not points:
            parts.append(h("p", {"class": "empty"}, "No fully evaluated node has a tallied cost yet."))
            continue
        if all(p.cost.usd is None for p in points):
            parts.append(h("p", {"class": "empty"}, "The task model's price is unknown: dollars are unknown, "
                                                    "tokens and seconds are in the table."))
        else:
            parts.append(h("div", {"class": "chart-box"}, front_chart(points, split)))
        parts.append(front_table(points, href))
    return h("section", {"class": "front"}, join(parts))


def node_costs(data: RunData, node: Node) -> Markup:
    """The node's cost per row on each domain and split it was evaluated on (evaluations it shares with another
    node show what the rows cost when they were paid, once)."""
    rows = []
    for domain in node.eval_keys:
        try:
            tallies = node_tallies(node, domain, tallies_of(data.path))
        except UserError as e:
            rows.append(h("tr", {}, h("td", {}, domain), h("td", {"colspan": 7}, str(e))))
            continue
        for split, tally in tallies.items():
            cost = per_row(tally)
            rows.append(h("tr", {}, h("td", {}, domain), h("td", {}, split), _cost_cells(cost),
                          h("td", {"class": "num"}, usd_text(cost.total_usd))))
    if not rows:
        return h("p", {"class": "empty"}, "No evaluation's cost was tallied.")
    head = ("domain", "split", "$ a row", "tokens in a row", "tokens out a row", "model seconds a row",
            "rows tallied", "$ of the rows")
    return h("table", {"class": "row-costs"}, h("tr", {}, join(h("th", {}, c) for c in head)), join(rows))
