"""`report.html`: one self-contained page per run (no script, no file beside it), to keep or mail.

It is made from the dashboard's own pieces (apps/dashboard/pieces.py): the summary, the
tree, the progress charts (and the held-out grader's gap, archive/heldout.py), the cost chart, spend by
role and model, the accuracy-cost front (apps/dashboard/front.py), the top nodes and the plan."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from apps.dashboard import front, pieces
from apps.dashboard.markup import Markup, h, join
from apps.dashboard.pages import static
from apps.dashboard.reader import RunReader
from services.fsutil import atomic_write_text

TOP = 15  # nodes in the table


def write_report(run_dir: Path, out: Path) -> Path:
    reader = RunReader(run_dir)
    data = reader.read()
    spend = reader.spend()
    body = join([
        h("h1", {}, f"Run {data.name}"),
        pieces.summary(data, spend),
        h("p", {"class": "note"}, f"Written at {datetime.now():%Y-%m-%d %H:%M:%S} while the run was running; "
                                  "python -m apps.dashboard shows it as it is now.") if data.live else "",
        h("h2", {}, "Archive"), pieces.tree(data, static=True),
        h("h2", {}, "Progress"), pieces.progress(data), pieces.heldout(data),
        h("h2", {}, "Cost"), pieces.cost_chart(reader), pieces.spend_table(spend), pieces.meta_models_table(data),
        h("h2", {}, "Accuracy and cost per row"), front.front(data),
        h("h2", {}, f"Top {TOP} nodes"),
        h("p", {}, "Scores are each domain's score key, with its 95% interval and the rows scored (n), as the "
                   "console writes them; a node that stopped at the staged evaluation has only those rows, one raced "
                   "out (loop.racing) those of its race. "
                   "Patches and transcripts are in the run folder (nodes/, untrusted/), or in its dashboard: "
                   "python -m apps.dashboard ", str(data.path)),
        pieces.nodes_table(data, limit=TOP),
        h("h2", {}, "Plan"), pieces.plan(data)])
    page = "<!doctype html>\n" + h(
        "html", {"lang": "en"},
        h("head", {}, h("meta", {"charset": "utf-8"}), h("title", {}, f"Run {data.name}"),
          h("style", {}, Markup(static("dashboard.css")))),
        h("body", {"class": "report"}, h("main", {}, body)))
    atomic_write_text(out, page)
    return out
