"""The parts of a run's pages, shared by the dashboard and report.html: the summary, the tree,
the progress and cost charts, the table of nodes, spend by role and model."""

from __future__ import annotations

import json
from collections.abc import Callable

from apps.dashboard.markup import Markup, h, join
from apps.dashboard.reader import RunData, RunReader
from apps.dashboard.svg import TreeNode, line_chart, score_colour, score_range, tree_svg
from archive.heldout import GenerationGap, Grade, read_heldout
from archive.records import Node
from archive.tamper import NOT_SCREENED
from search.meta_model_choice import arms, pulls_of
from search.stats import interval_text
from services.errors import UserError
from services.render import bidi_visible


def fmt_score(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def fmt_cost(value: float) -> str:
    return f"${value:.4f}" if value < 10 else f"${value:,.2f}"


def best_cell(data: RunData) -> Markup:
    """The run's best node, its score and the score's 95% interval (where the run has one)."""
    best = data.best()
    if best is None:
        return Markup("")
    band = data.interval(best)
    return h("span", {}, f"{best.node_id}: {fmt_score(data.score(best))}",
             h("small", {"title": "95% interval"}, f" {interval_text(*band)}") if band else "")


def tag_chips(tags: list[str], href: Callable[[str], str] | None = None) -> Markup:
    """A run's tags, each a link to the runs that carry it when `href(tag)` is given."""
    return join((h("a", {"class": "tag", "href": href(t)}, t) if href else h("span", {"class": "tag"}, t))
                for t in tags)


def splits_of(data: RunData) -> list[tuple[str, str]]:
    """(domain, split) pairs that some node has a score for, train, val, test in that order."""
    order = {"train": 0, "val": 1, "test": 2}
    found = {(d, s) for n in data.nodes.values() for d, splits in n.scores.items() for s in splits}
    return sorted(found, key=lambda p: (data.domains.index(p[0]) if p[0] in data.domains else 99,
                                        order.get(p[1], 9), p[1]))


def summary(data: RunData, spend: list[dict] | None = None) -> Markup:
    """The run's facts; its cost from `spend` (the ledger's rows, with what prompt caching saved) where it has
    any, else from the nodes' records."""
    best = data.best()
    status = data.status + (f", {len(data.in_flight)} in flight" if data.in_flight and data.live else "")
    cut = [f for f in data.in_flight] if not data.live else []
    cost = fmt_cost(sum(r["cost_usd"] for r in spend) if spend else data.cost())
    facts = [*((("name", data.title),) if data.title else ()),
             *((("tags", tag_chips(data.tags)),) if data.tags else ()),
             ("domains", ", ".join(data.domains) or "?"), ("nodes", str(len(data.nodes))), ("status", status),
             ("best", f"{best.node_id} ({fmt_score(data.score(best))})" if best else "none yet"),
             ("cost", cost + caching_note(spend or [])), ("last event", data.updated())]
    if cut:
        facts.append(("cut short", ", ".join(f.node_id for f in cut) + " (redone when the run resumes)"))
    items = join(h("div", {"class": "fact"}, h("span", {"class": "key"}, k), h("span", {"class": "value"}, v))
                 for k, v in facts)
    problems = h("ul", {"class": "problems"}, join(h("li", {}, p) for p in data.problems)) if data.problems else ""
    return h("section", {"class": "summary"}, items, problems)


def tree(data: RunData, href: Callable[[str], str] | None = None, static: bool = False) -> Markup:
    """The archive tree of the run, with the generations in flight as dashed leaves. `static` (report.html, a
    page with no script): drawn to fit its frame, and its legend says nothing of panning or zooming."""
    best = data.best()
    nodes = [TreeNode(n.node_id, n.parent, n.generation, str(n.status), data.score(n), _tooltip(data, n),
                      n.parents[1] if len(n.parents) > 1 else None) for n in data.nodes.values()]
    if data.live:
        nodes += [TreeNode(f.node_id, f.parent, f.generation, "in_flight", None,
                           f"node {f.node_id} (parent {f.parent}): in flight, {f.phase}") for f in data.in_flight]
    legend = h("p", {"class": "tree-legend"}, colour_key(score_range(n.score for n in nodes)), "; a ring: not ok; "
               "thick lines: the best node's lineage; dashed: in flight; dotted: a merge's second parent.",
               "" if static else " Drag to pan, wheel to zoom.")
    drawing = tree_svg(nodes, data.lineage(best.node_id) if best else [], href, fit=static)
    return h("section", {"class": "tree-box"}, legend,
             h("div", {"class": "tree-frame"}, drawing) if static else
             h("div", {"class": "tree-view", "tabindex": "0"}, drawing))


def colour_key(scale: tuple[float, float]) -> Markup:
    """What the tree's colours mean: the score at each end of the scale (svg.score_range) and its middle."""
    low, high = scale
    shown = [dot(score_colour(v, scale)) + f" {fmt_score(v)}" for v in (low, (low + high) / 2, high)]
    fitted = " (the lowest and highest score shown)" if scale != (0.0, 1.0) else ""
    return h("span", {"class": "colour-key", "data-low": fmt_score(low), "data-high": fmt_score(high)},
             "Colour: score from ", shown[0], " through ", shown[1], " to ", shown[2], fitted, "; ",
             dot(score_colour(None)), " none")


def dot(colour: str) -> Markup:
    return h("svg", {"class": "dot-key", "width": 12, "height": 12, "viewBox": "0 0 12 12"},
             h("circle", {"cx": 6, "cy": 6, "r": 5, "fill": colour}))


def _tooltip(data: RunData, node: Node) -> str:
    """What hovering a node of the tree says (its page says the rest)."""
    error = f"; {bidi_visible(node.error[:120])}" if node.error else ""
    warning = "; warning: bidi control characters in its change" if bidi_files(node) else ""
    suspicious = f"; suspicious ({len(node.flags)} reasons)" if node.flags else ""
    return f"node {node.node_id} from {node.parent}: {node.status}, score {fmt_score(data.score(node)) or 'none'}, " \
           f"{fmt_cost(sum(node.cost_usd.values()))}{error}{warning}{suspicious}"


def bidi_files(node: Node) -> list[str]:
    """The files of the node's change whose added lines hold bidi controls (recorded at capture)."""
    files = node.patch.get("bidi") if isinstance(node.patch, dict) else None
    return [str(f) for f in files] if isinstance(files, list) else []


def suspicious_warning(node: Node) -> Markup:
    """Why the node is flagged suspicious (archive/tamper.py), on its page: it ran and was scored as
    any other; the reasons say where to look in its change and transcript."""
    if not node.flags:
        return Markup("")
    reached = any(not reason.startswith(NOT_SCREENED) for reason in node.flags)
    lead = ("Suspicious: this node's change or its meta agent reached for the scoring side. " if reached else
            "Not screened: this node's change or transcript was too large to screen for the scoring side in full. ")
    return h("div", {"class": "warning suspicious-warning"},
             h("p", {}, lead + "It ran and was scored as any other; read its change and transcript below."),
             h("ul", {}, join(h("li", {}, bidi_visible(reason)) for reason in node.flags)))


def bidi_warning(node: Node) -> Markup:
    """The warning a node whose change holds bidi controls carries on its page, as code hosts show it."""
    files = bidi_files(node)
    if not files:
        return Markup("")
    return h("p", {"class": "warning bidi-warning"}, "Warning: this change holds bidi control characters in ",
             ", ".join(map(bidi_visible, files)), ": its code may run differently from how it reads. "
             "Each is marked in the diff below.")


def progress(data: RunData) -> Markup:
    """Per domain, each split's scores over generations: a dot per node, a step line for the best so far,
    drawn on to the run's last generation (generations whose nodes have no full score still count); the train
    (or val) scores of nodes that only went through screening as dots of their own (a run whose every node stopped
    there, the initial one too, has nothing else to draw); where nothing is scored, why."""
    charts = []
    last = max((n.generation for n in data.nodes.values()), default=0)
    for domain in data.domains:
        dots, lines = {}, {}
        for split in ("train", "val"):
            screened = sorted((n.generation, score) for n in data.nodes.values() if not n.full_eval.get(domain)
                              and (score := n.scores.get(domain, {}).get(split)) is not None)
            if screened:
                dots[f"{split}, screening only"] = screened
        for split in ("train", "val", "test"):
            points = sorted((n.generation, score) for n in data.nodes.values()
                            if (score := n.scores.get(domain, {}).get(split)) is not None
                            and (split != "train" or n.full_eval.get(domain)))
            if not points:
                continue
            dots[split] = points
            best, running = points[0][1], []
            for generation, score in points:
                if score > best:
                    running.append((generation, best))
                best = max(best, score)
                running.append((generation, best))
            if last > running[-1][0]:
                running.append((last, best))
            lines[f"{split} best so far"] = running
        chart = line_chart(lines, "generation", "score", dots=dots) if lines or dots else \
            h("p", {"class": "empty"}, unscored(data, domain))
        charts.append(h("div", {"class": "chart-box"}, h("h3", {}, domain), chart))
    return h("section", {"class": "charts"}, join(charts))


def unscored(data: RunData, domain: str) -> str:
    """Why a domain's progress has nothing to draw: no node yet, or how the recorded nodes ended."""
    if not data.nodes:
        return "Nothing to draw yet: no node is recorded." if data.live else \
            "Nothing to draw: the run recorded no node."
    counts: dict[str, int] = {}
    for node in data.nodes.values():
        counts[str(node.status)] = counts.get(str(node.status), 0) + 1
    ended = ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))
    return (f"{'Nothing to draw yet' if data.live else 'Nothing to draw'}: no node has a {domain} score "
            f"({len(data.nodes)} recorded: {ended}).")


def heldout(data: RunData) -> Markup:
    """With models.heldout_grader (archive/heldout.py): per generation, the best node's grade by the grader
    the run optimizes against and by the held-out grader, on the same proofs (a dot per node graded), then
    each graded node's two grades and their gap; nothing for a run without one."""
    try:
        record = read_heldout(data.path)
    except UserError as e:
        return join([h("h2", {}, "Judge robustness"), h("ul", {"class": "problems"}, h("li", {}, str(e)))])
    if record is None or not record.grades:
        return Markup("")
    grades = [g for g in record.grades if g.model == record.model]
    graders = ", ".join(dict.fromkeys(g.grader for g in grades))
    names = (f"optimized grader ({graders})", f"held-out grader ({record.model})")
    lines: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for entry in record.generations:
        for name, value in zip(names, (entry.optimized, entry.heldout)):
            if value is None:
                continue
            line = lines[name]
            if line and line[-1][1] != value:
                line.append((entry.generation, line[-1][1]))
            line.append((entry.generation, value))
    dots: dict[str, list[tuple[float, float]]] = {
        names[0]: [(g.generation, g.optimized) for g in grades if g.optimized is not None],
        names[1]: [(g.generation, g.heldout) for g in grades if g.heldout is not None]}
    last = record.generations[-1] if record.generations else None
    gap = (f" At generation {last.generation} the best node, {last.best}, has a gap of {last.gap:+.3f} (the "
           "optimized grader's grade minus the held-out one's)." if last and last.gap is not None else "")
    note = h("p", {}, "The proofs the best node of each generation wrote, graded again by a model the run never "
                      "optimizes against: a gap that widens is a task agent learning its grader rather than the "
                      "task. Lines: the best node's two grades; dots: every node graded." + gap)
    return join([h("h2", {}, "Judge robustness"), note,
                 h("div", {"class": "chart-box"}, line_chart(lines, "generation", "grade", dots=dots,
                                                             y_range=(0.0, 1.0))),
                 heldout_table(grades, record.generations)])


def heldout_table(grades: list[Grade], generations: list[GenerationGap]) -> Markup:
    """Each graded node's two grades of the same proofs, their gap with its 95% interval, the cost, and the
    generations it was the best of."""
    best_at: dict[str, list[int]] = {}
    for entry in generations:
        best_at.setdefault(entry.best, []).append(entry.generation)
    head = h("tr", {}, join(h("th", {}, c) for c in ("node", "gen", "domain", "proofs", "optimized grader",
                                                        "held-out grader", "gap", "95% interval", "cost",
                                                        "best at generations")))
    rows = join(h("tr", {}, h("td", {}, g.node_id), h("td", {"class": "num"}, g.generation), h("td", {}, g.domain),
                  h("td", {"class": "num"}, g.rows), h("td", {"class": "num"}, fmt_score(g.optimized)),
                  h("td", {"class": "num"}, fmt_score(g.heldout) if g.error is None else h("span", {"title": g.error},
                                                                                         "failed")),
                  h("td", {"class": "num"}, "" if g.gap is None else f"{g.gap:+.3f}"),
                  h("td", {"class": "num"}, interval_text(*g.gap_interval) if g.gap_interval else ""),
                  h("td", {"class": "num"}, fmt_cost(g.cost_usd)),
                  h("td", {}, spans(best_at.get(g.node_id, []))))
                for g in sorted(grades, key=lambda g: (g.generation, g.node_id, g.domain)))
    return h("table", {"class": "heldout"}, head, rows)


def spans(numbers: list[int]) -> str:
    """Sorted numbers as runs: `1-3, 5`."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cost_chart(reader: RunReader) -> Markup:
    """Dollars spent by role and model since the first call; tokens instead while every call cost $0 (a local
    or free model), where a flat line at $0 would say nothing of the work done."""
    times, series = reader.spend_over_time()
    if not times:
        return h("p", {"class": "empty"}, "No call in the ledger yet.")
    y_label = "dollars spent"
    if not any(v for values in series.values() for v in values):
        times, series = reader.spend_over_time("tokens")
        y_label = "tokens (every call cost $0)"
    start = times[0]
    lines = {name: [((t - start) / 60, v) for t, v in zip(times, values)] for name, values in series.items()}
    return line_chart(lines, "minutes since the first call", y_label)


def fmt_saved(value: float) -> str:
    """Dollars prompt caching saved (less than 0 where cache writes cost more than reads saved)."""
    return ("-" if value < 0 else "") + fmt_cost(abs(value))


def caching_note(spend: list[dict]) -> str:
    """After a cost: what providers' prompt caches saved of it, when they read any prompt tokens."""
    read = sum(r["cached_tokens"] for r in spend)
    if not read:
        return ""
    return f" (prompt caching saved {fmt_saved(sum(r['cache_saved_usd'] for r in spend))}; {read:,} prompt tokens " \
           "read from providers' caches)"


# The ledger's columns per role and model (LedgerReader.spend): heading, key, how a number is shown, whether
# the total row sums it.
_SPEND = (("calls", "calls", str, True), ("prompt tokens", "prompt_tokens", "{:,}".format, True),
          ("of them cached", "cached_tokens", "{:,}".format, True),
          ("cache writes", "cache_write_tokens", "{:,}".format, True),
          ("completion tokens", "completion_tokens", "{:,}".format, True), ("cost", "cost_usd", fmt_cost, True),
          ("saved by caching", "cache_saved_usd", fmt_saved, True), ("replayed", "cache_hits", str, False),
          ("errors", "errors", str, False))


def spend_table(rows: list[dict]) -> Markup:
    """Spend by role and model; prompt tokens include those read from a provider's cache (and written to it),
    whose cost is the cached rate; "replayed" are answers the gateway gave again from its own cache."""
    if not rows:
        return h("p", {"class": "empty"}, "No call booked.")
    head = h("tr", {}, join(h("th", {}, c) for c in ("role", "model", *(c[0] for c in _SPEND))))
    body = join(h("tr", {}, h("td", {}, r["role"]), h("td", {}, r["model"]),
                  join(h("td", {"class": "num"}, shown(r[key])) for _, key, shown, _ in _SPEND)) for r in rows)
    foot = h("tr", {"class": "total"}, h("td", {}, "total"), h("td", {}),
             join(h("td", {"class": "num"}, shown(sum(r[key] for r in rows))) if summed else h("td", {})
                  for _, key, shown, summed in _SPEND))
    return h("table", {"class": "spend"}, head, body, foot)


def meta_models_table(data: RunData) -> Markup:
    """With a bandit over several meta models (models.meta a list): each model's generations, the
    children that gained on their parent, its mean reward (score gained per dollar) and its cost,
    as search/meta_model_choice/ counts them from the records; nothing for a run with one meta model."""
    models = list(dict.fromkeys(n.meta_model for n in data.nodes.values() if n.meta_model))
    if len(models) < 2:
        return Markup("")
    pulls = pulls_of(data.nodes, data.score)
    head = h("tr", {}, join(h("th", {}, c) for c in ("meta model", "generations", "gained on parent",
                                                        "mean gain per $", "cost")))
    body = join(h("tr", {}, h("td", {}, a.model), h("td", {"class": "num"}, a.pulls),
                  h("td", {"class": "num"}, a.improved), h("td", {"class": "num"}, f"{a.mean_reward:.4g}"),
                  h("td", {"class": "num"}, fmt_cost(a.cost_usd))) for a in arms(models, pulls))
    return join([h("h2", {}, "Meta models"), h("table", {"class": "meta-models"}, head, body)])


def score_note(node: Node, domain: str, split: str) -> Markup:
    """After a score: its 95% interval and rows as the console writes them, ` [0.522, 0.710] n=100`, and on the
    split a race ran (val, else train) of a node loop.racing stopped, `raced out` with its verdict as the title."""
    found = node.evaluation(domain, split)
    if found is None or not found.rows:
        return Markup("")
    raced = node.raced_out and split == ("val" if node.evaluation(domain, "val") else "train")
    return h("small", {"title": node.raced_out if raced else f"95% interval, {found.rows} rows"},
             f" {interval_text(*found.interval)}" if found.interval else "", f" n={found.rows}",
             " raced out" if raced else "")


def node_seconds(node: Node) -> float:
    """The node's wall time: its total, else the sum of its phases (the initial node, only evaluated, records
    no total: its check and evaluation are its time)."""
    return node.seconds.get("total", sum(node.seconds.values()))


def fmt_seconds(value: float) -> str:
    """`108 s`, and a tenth under 10 s (a node of a fast run is not "0 s")."""
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def nodes_table(data: RunData, href: Callable[[str], str] | None = None, limit: int | None = None) -> Markup:
    """Nodes, best first: status, parent, scores per domain and split with their row counts, cost, time."""
    splits = splits_of(data)
    best = data.best()
    ranked = sorted(data.nodes.values(), key=lambda n: (n.valid_parent, data.score(n) or 0.0, n.generation),
                    reverse=True)[:limit]
    head = h("tr", {}, h("th", {}, "node"), h("th", {}, "parent"), h("th", {}, "gen"), h("th", {}, "status"),
             join(h("th", {}, f"{d} {s}") for d, s in splits), h("th", {}, "cost"), h("th", {}, "time"))
    rows = []
    for n in ranked:
        name = h("a", {"href": href(n.node_id)}, n.node_id) if href else n.node_id
        star = Markup(" &#9733;") if best and n.node_id == best.node_id else ""
        cells = join(h("td", {"class": "num"}, fmt_score(n.scores.get(d, {}).get(s)), score_note(n, d, s))
                     for d, s in splits)
        flag = join([h("span", {"class": "bidi-flag", "title": "bidi control characters in its change"}, " bidi!")
                     if bidi_files(n) else "",
                     h("span", {"class": "suspicious-flag", "title": "; ".join(n.flags)}, " suspicious")
                     if n.flags else ""])
        rows.append(h("tr", {"class": f"status-{n.status}"}, h("td", {}, name, star), h("td", {}, n.parent or ""),
                      h("td", {"class": "num"}, n.generation), h("td", {}, str(n.status), flag), cells,
                      h("td", {"class": "num"}, fmt_cost(sum(n.cost_usd.values()))),
                      h("td", {"class": "num"}, fmt_seconds(node_seconds(n)))))
    return h("table", {"class": "nodes"}, head, join(rows))


def plan(data: RunData) -> Markup:
    """What the run was started with: its domains, sandbox and configuration (run.json)."""
    if data.record is None:
        return h("p", {"class": "empty"}, "No run.json to show.")
    config = data.record.config
    models = config.get("models", {}) if isinstance(config, dict) else {}
    facts = [("domains", ", ".join(data.record.domains)), ("sandbox", data.record.sandbox or "?"),
             *((f"model {role}", "off" if model is None else str(model)) for role, model in models.items()),
             ("updated", data.record.updated_at)]
    return h("section", {"class": "plan"},
             h("dl", {}, join(h("div", {}, h("dt", {}, k), h("dd", {}, v)) for k, v in facts)),
             h("details", {}, h("summary", {}, "configuration (run.json)"),
               h("pre", {}, json.dumps(config, indent=2, default=str))))
