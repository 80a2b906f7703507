"""The dashboard's pages: the runs of a folder, one run, one node, two nodes side by side.

Every page is whole HTML from `page`; the browser script swaps `<main>` for a fresh copy when
the run's version changes, so a live page is the same page read again. What agents wrote is
passed as plain strings and escaped by `markup.h`.
"""

from __future__ import annotations

from importlib import resources

from apps.dashboard import front, pieces, transcript
from apps.dashboard.evaluations import Evaluation, evaluations_table
from apps.dashboard.flight import MAX_TAIL, InFlight
from apps.dashboard.markup import Markup, h, join, url
from apps.dashboard.reader import RunData, RunReader, Text, known_domain
from archive.records import Node
from archive.run_state import Phase
from search.stats import interval_text

MAX_ROWS_SHOWN = 500  # predictions listed on a node page, wrong ones first
MAX_DIFF_LINES = 20_000  # lines of a diff coloured one by one (500,000 took 2.5 s); the rest is shown plain
TOP_NODES = 50  # nodes in the run page's table (all of them: /runs/<run>/nodes)


def static(name: str) -> str:
    return resources.files("apps.dashboard").joinpath("static", name).read_text(encoding="utf-8")


def page(title: str, body: Markup, crumbs: list[tuple[str, str | None]], live: str | None = None,
         version: str = "") -> str:
    nav = join(h("a", {"href": link}, text) if link else h("span", {}, text) for text, link in crumbs)
    return "<!doctype html>\n" + h(
        "html", {"lang": "en"},
        h("head", {}, h("meta", {"charset": "utf-8"}),
          h("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
          h("title", {}, title), h("link", {"rel": "icon", "href": "data:,"}),  # no favicon request
          h("link", {"rel": "stylesheet", "href": "/static/dashboard.css"})),
        h("body", {}, h("header", {}, h("nav", {}, nav), h("span", {"class": "live-state", "id": "live-state"})),
          h("main", {"id": "main", "data-live": live, "data-version": version}, body),
          h("script", {"src": "/static/dashboard.js"})))


def index(runs: list[tuple[str, RunData]], version: str, tag: str | None = None,
          evaluations: list[Evaluation] | None = None) -> str:
    """The runs of the folder (those carrying `tag`, when given), each with a box to pick it for the
    comparison of runs; then, apart, the evaluation folders of domains.harness among them."""
    known = sorted({t for _, data in runs for t in data.tags})
    shown = [(name, data) for name, data in runs if tag is None or tag in data.tags]
    rows = []
    for name, data in shown:
        rows.append(h("tr", {"class": "run", "data-run": name},
                      h("td", {}, h("input", {"type": "checkbox", "name": "run", "value": name,
                                              "aria-label": f"compare {name}"})),
                      h("td", {}, h("a", {"href": url("runs", name)}, name)),
                      h("td", {"class": "run-name"}, data.title),
                      h("td", {"class": "tags"}, pieces.tag_chips(data.tags, lambda t: url(tag=t))),
                      h("td", {}, ", ".join(data.domains)), h("td", {"class": "num"}, len(data.nodes)),
                      h("td", {}, str(data.state)),
                      h("td", {"class": "num"}, len(data.in_flight) if data.live else ""),
                      h("td", {"class": "best"}, pieces.best_cell(data)),
                      h("td", {"class": "num"}, pieces.fmt_cost(data.cost())), h("td", {}, data.updated())))
    head = h("tr", {}, join(h("th", {}, c) for c in ("", "run", "name", "tags", "domains", "nodes", "status",
                                                        "in flight", "best [95% interval]", "cost", "last event")))
    filters = h("p", {"class": "tag-filter"}, "Tags: ",
                h("a", {"href": "/", "class": "tag" + " chosen" * (tag is None)}, "all"), " ",
                join((h("a", {"href": url(tag=t), "class": "tag" + " chosen" * (t == tag)}, t) for t in known), " ")) \
        if known else Markup("")
    table = h("form", {"class": "runs-form", "method": "get", "action": "/compare"},
              h("table", {"class": "runs"}, head, join(rows)),
              h("button", {"type": "submit", "id": "compare-runs"}, "compare the runs ticked"))
    body = h("h1", {}, "Runs" + (f" tagged {tag}" if tag is not None else "")) + filters + (
        table if rows else h("p", {"class": "empty"}, "No run in this folder yet." if tag is None
                             else "No run carries this tag.")) + evaluations_table(evaluations or [])
    return page("Runs", body, [("runs", None)], url("live"), version)


def run_page(reader: RunReader, data: RunData) -> str:
    name = data.name
    spend = reader.spend()
    body = join([
        h("h1", {}, f"Run {name}"),
        pieces.summary(data, spend),
        in_flight(data),
        h("h2", {}, "Archive"), pieces.tree(data, lambda n: url("runs", name, "nodes", n)),
        compare_form(data, *default_pair(data)),
        h("h2", {}, "Progress"), pieces.progress(data), pieces.heldout(data),
        h("h2", {}, "Cost"), pieces.cost_chart(reader), pieces.spend_table(spend), pieces.meta_models_table(data),
        h("h2", {}, "Accuracy and cost per row"), front.front(data, lambda n: url("runs", name, "nodes", n)),
        h("h2", {}, "Nodes"), nodes_list(data, TOP_NODES),
        h("h2", {}, "Plan"), pieces.plan(data)])
    return page(f"{name}: runs", body, [("runs", "/"), (name, None)], url("runs", name, "live"),
                reader.version())


def nodes_list(data: RunData, limit: int | None) -> Markup:
    """The table of nodes, best first; on the run page the first `limit`, with a link to them all."""
    def link(n: str) -> str:
        return url("runs", data.name, "nodes", n)

    more = h("p", {}, h("a", {"href": url("runs", data.name, "nodes"), "id": "all-nodes"},
                        f"all {len(data.nodes)} nodes")) if limit is not None and len(data.nodes) > limit else ""
    return pieces.nodes_table(data, link, limit) + more


def nodes_page(reader: RunReader, data: RunData) -> str:
    body = h("h1", {}, f"Nodes of run {data.name}") + nodes_list(data, None)
    return page(f"nodes: {data.name}", body, [("runs", "/"), (data.name, url("runs", data.name)), ("nodes", None)],
                url("runs", data.name, "live"), reader.version())


def in_flight(data: RunData) -> Markup:
    if not data.live or not data.in_flight:
        return Markup("")
    rows = []
    for f in data.in_flight:
        rows.append(h("tr", {"class": "in-flight", "data-node": f.node_id},
                      h("td", {}, h("a", {"href": url("runs", data.name, "nodes", f.node_id)}, f.node_id)),
                      h("td", {}, f.parent or ""), h("td", {"class": "num"}, f.generation),
                      h("td", {}, str(f.phase)), h("td", {}, split_progress(f)), h("td", {}, f.started)))
    head = h("tr", {}, join(h("th", {}, c) for c in ("node", "parent", "gen", "phase", "rows", "started")))
    return h("section", {"class": "flight"}, h("h2", {}, "In flight"), h("table", {}, head, join(rows)))


def split_progress(flight: InFlight) -> Markup:
    return join(h("div", {"class": "split-progress"}, f"{s['domain']} {s['split']}: {s['done']}/{s['rows']} rows",
                  h("progress", {"max": max(s["rows"], 1), "value": min(s["done"], s["rows"])}))
                for s in flight.splits)


def flight_page(reader: RunReader, data: RunData, flight: InFlight) -> str:
    """A generation started and not recorded: what is known of it so far."""
    name, node_id = data.name, flight.node_id
    where = str(flight.phase) if data.live else f"cut short ({data.status}); redone when the run resumes"
    facts = [("status", f"in flight: {where}"), ("generation", str(flight.generation)), ("started", flight.started)]
    rows = []
    for split in flight.splits:
        found, _ = reader.split_rows(split["key"])
        rows += [h("tr", {}, h("td", {}, f"{split['domain']} {split['split']}"), h("td", {}, r["id"]),
                   h("td", {"class": "pred"}, r["prediction"][:400]), h("td", {}, r["error"][:300]))
                 for r in found[:MAX_ROWS_SHOWN]]
    done = (h("table", {"class": "predictions"}, h("tr", {}, join(h("th", {}, c) for c in
                                                                  ("evaluation", "row", "prediction", "error"))),
              join(rows)) if rows else h("p", {"class": "empty"}, "No row done yet."))
    body = join([
        h("h1", {}, f"Node {node_id} (in flight)"),
        h("p", {"class": "kin"}, "parent: ", h("a", {"href": url("runs", name, "nodes", flight.parent)}, flight.parent)
          if flight.parent else "none"),
        h("dl", {"class": "facts"}, join(h("div", {}, h("dt", {}, k), h("dd", {}, v)) for k, v in facts)),
        h("h2", {}, "Evaluations"), split_progress(flight) or h("p", {"class": "empty"}, "None started yet."),
        h("h2", {}, "Rows done so far (scores come with the record)"), done,
        h("h2", {}, "Meta agent transcript, so far"), live_transcript(reader, data, flight)])
    return page(f"node {node_id}: {name}", body, [("runs", "/"), (name, url("runs", name)), (f"node {node_id}", None)],
                url("runs", name, "live"), reader.version())


def live_transcript(reader: RunReader, data: RunData, flight: InFlight) -> Markup:
    """The end of the transcript the meta agent is writing: the page follows it while the agent works
    (the run's version counts the file), and when the agent is done, the whole of it."""
    if not (data.live and flight.phase == Phase.META):
        return transcript_block(reader.transcript(flight.node_id))
    tail = reader.transcript_tail(flight.node_id)
    note = h("p", {"class": "note", "id": "transcript-live"},
             f"The meta agent is at work: its transcript's last {MAX_TAIL // 1024} KiB, followed as it grows.")
    if tail.missing:
        return note + h("p", {"class": "empty"}, f"No transcript: {tail.missing}.")
    cut = h("p", {"class": "cut"}, "Earlier turns are left out here: the whole is in the run folder.") \
        if tail.cut else Markup("")
    return note + cut + h("pre", {"class": "text", "id": "transcript"}, tail.text)


def default_pair(data: RunData) -> tuple[str | None, str | None]:
    """The two nodes the run page's form compares unless told: the best node's parent and the best node,
    or, where the best has no parent (the initial node is still best), the newest node's with a parent
    (what its change did); with no node built on another, the first and the last."""
    best = data.best()
    if best is not None and best.parent in data.nodes:
        return best.parent, best.node_id
    children = [n for n in data.nodes.values() if n.parent in data.nodes]
    if children:
        newest = max(children, key=lambda n: (n.generation, n.created_at, n.node_id))
        return newest.parent, newest.node_id
    ids = sorted(data.nodes, key=lambda n: (data.nodes[n].generation, n))
    return (ids[0], ids[-1]) if ids else (None, None)


def compare_form(data: RunData, a: str | None, b: str | None) -> Markup:
    ids = sorted(data.nodes, key=lambda n: (data.nodes[n].generation, n))
    if len(ids) < 2:
        return Markup("")  # nothing to compare a node with

    def choice(field: str, chosen: str | None) -> Markup:
        options = join(h("option", {"value": n, "selected": n == chosen}, n) for n in ids)
        return h("label", {}, f"{field} ", h("select", {"name": field, "id": f"compare-{field}"}, options))

    return h("form", {"class": "compare-form", "method": "get", "action": url("runs", data.name, "compare")},
             "Compare nodes ", choice("a", a), " and ", choice("b", b), " ",
             h("button", {"type": "submit", "id": "compare-go"}, "compare"))


def node_page(reader: RunReader, data: RunData, node: Node) -> str:
    name, node_id = data.name, node.node_id
    def link(n: str) -> str:
        return url("runs", name, "nodes", n)

    children = sorted((n for n in data.nodes.values() if n.parent == node_id), key=lambda n: n.generation)
    facts = [("status", str(node.status)), ("generation", str(node.generation)),
             ("created", node.created_at), ("score", pieces.fmt_score(data.score(node)))]
    head = join([
        h("h1", {}, f"Node {node_id}"),
        h("p", {"class": "kin"},
          "parent: ", h("a", {"href": link(node.parent)}, node.parent) if node.parent else "none",
          *((" merged with ", h("a", {"href": link(node.parents[1])}, node.parents[1])) if len(node.parents) > 1
            else ()),
          "; children: ", join((h("a", {"href": link(c.node_id)}, c.node_id) for c in children), ", ") if children
          else "none",
          *((" · ", h("a", {"href": url("runs", name, "compare", a=node.parent, b=node_id), "id": "vs-parent"},
                      "compare with its parent")) if node.parent else ())),
        h("dl", {"class": "facts"}, join(h("div", {}, h("dt", {}, k), h("dd", {}, v)) for k, v in facts)),
        h("pre", {"class": "error"}, node.error) if node.error else "", pieces.suspicious_warning(node),
        pieces.bidi_warning(node)])
    body = join([
        head,
        h("h2", {}, "Scores"), scores_table(node),
        h("h2", {}, "Time"), h("table", {"class": "time"}, join(h("tr", {}, h("th", {}, phase),
                                                                  h("td", {"class": "num"}, f"{s:.1f} s"))
                                                             for phase, s in node.seconds.items())),
        h("h2", {}, "Cost and tokens"), pieces.spend_table(reader.spend(node_id)),
        h("h3", {}, "Per row of its evaluations"), front.node_costs(data, node),
        h("h2", {}, "Change"), patch_facts(node), diff_block(reader.patch(node_id), "patch"),
        h("h2", {}, "Meta agent transcript"), transcript_block(reader.transcript(node_id)),
        h("h2", {}, "Predictions, wrong first, beside the gold labels"), predictions(reader, node)])
    return page(f"node {node_id}: {name}", body, [("runs", "/"), (name, url("runs", name)), (f"node {node_id}", None)],
                url("runs", name, "live"), reader.version())


def scores_table(node: Node) -> Markup:
    rows = [h("tr", {}, h("td", {}, domain), h("td", {}, split), h("td", {"class": "num"}, pieces.fmt_score(e.score)),
              h("td", {"class": "num"}, interval_text(*e.interval) if e.interval else ""),
              h("td", {"class": "num"}, "" if e.rows is None else e.rows),
              h("td", {}, "full" if node.full_eval.get(domain) else "raced out" if node.raced_out else "staged"))
            for domain, split, e in node.evaluations()]
    if not rows:
        return h("p", {"class": "empty"}, "Not scored.")
    screening = [h("li", {}, f"{domain}: {line}") for domain, lines in node.screening.items() for line in lines]
    screening += [h("li", {}, f"race: {node.raced_out}")] if node.raced_out else []
    return join([h("table", {"class": "scores"}, h("tr", {}, join(h("th", {}, c) for c in (
        "domain", "split", "score", "95% interval", "rows", "evaluation"))), join(rows)),
        h("ul", {"class": "screening"}, join(screening)) if screening else Markup("")])


def patch_facts(node: Node) -> Markup:
    patch = node.patch
    dropped = patch.get("dropped_why") or {p: "" for p in patch.get("dropped", [])}
    line = f"{patch.get('files', 0)} files changed, +{patch.get('insertions', 0)} -{patch.get('deletions', 0)}"
    items = join(h("li", {}, path, f": {why}" if why else "") for path, why in dropped.items()) \
        if isinstance(dropped, dict) else ""
    return h("p", {}, line, "; left out of the commit:" if items else "",
             h("ul", {"class": "dropped"}, items) if items else "")


def diff_block(text: Text, what: str) -> Markup:
    if text.missing:
        return h("p", {"class": "empty"}, f"No {what}: {text.missing}.")
    lines, parts = [], text.text.split("\n", MAX_DIFF_LINES)
    for line in "\n".join(parts[:MAX_DIFF_LINES]).splitlines():
        kind = ("file" if line.startswith(("diff --git", "+++ ", "--- ", "index ", "new file", "deleted file"))
                else "hunk" if line.startswith("@@") else "add" if line.startswith("+")
                else "del" if line.startswith("-") else "ctx")
        lines.append(h("span", {"class": kind}, line) + Markup("\n"))
    rest = parts[MAX_DIFF_LINES] if len(parts) > MAX_DIFF_LINES else ""
    return h("pre", {"class": "diff", "id": what}, join(lines), rest) + cut_note(text)


def text_block(text: Text, what: str) -> Markup:
    if text.missing:
        return h("p", {"class": "empty"}, f"No {what}: {text.missing}.")
    return h("pre", {"class": "text", "id": what}, text.text) + cut_note(text)


def transcript_block(text: Text) -> Markup:
    """A meta agent's whole transcript, its summary first (apps/dashboard/transcript.py)."""
    return text_block(text, "transcript") if text.missing else transcript.block(text) + cut_note(text)


def cut_note(text: Text) -> Markup:
    return h("p", {"class": "cut"}, "Cut here: the rest is in the run folder.") if text.cut else Markup("")


def predictions(reader: RunReader, node: Node) -> Markup:
    """Each train and val evaluation's rows, wrong first, with the label from its predictions.csv:
    shown to the person at the dashboard only (agents' feedback is optimizer/feedback.py's, and this
    package writes nothing)."""
    parts = []
    for domain, keys in node.eval_keys.items():
        known = known_domain(domain)
        for split in ("train", "val"):
            key = keys.get(split)
            if key is None:
                continue
            rows, failed = reader.split_rows(key)
            labels = reader.labels(key, known.question_id, known.label_column) \
                if known is not None and known.label_column else {}
            if failed is not None:
                rows = sorted(rows, key=lambda r: r["id"] not in failed)
            body = join(h("tr", {"class": "wrong" if failed and r["id"] in failed else "right"}, h("td", {}, r["id"]),
                          h("td", {}, "?" if failed is None else "wrong" if r["id"] in failed else "right"),
                          h("td", {"class": "pred"}, r["prediction"][:400]),
                          h("td", {"class": "label"}, labels.get(r["id"], "")[:400]), h("td", {}, r["error"][:300]))
                        for r in rows[:MAX_ROWS_SHOWN])
            wrong = "" if failed is None else f": {len(failed)} wrong of {len(rows)}"
            parts.append(h("h3", {}, f"{domain} {split}{wrong}") +
                         h("table", {"class": "predictions", "data-split": split},
                           h("tr", {}, join(h("th", {}, c) for c in ("row", "verdict", "prediction", "gold label",
                                                                      "error"))), body))
    return join(parts) or h("p", {"class": "empty"}, "No train or val evaluation.")
