"""Two nodes side by side: their scores, a paired test of the difference on the rows both answered,
the code diff from one to the other, and the rows whose prediction changed, with whether the
change made them right or wrong."""

from __future__ import annotations

import subprocess

from apps.dashboard import pieces
from apps.dashboard.markup import Markup, h, join, url
from apps.dashboard.pages import compare_form, diff_block, page
from apps.dashboard.reader import RunData, RunReader, known_domain
from apps.dashboard.run_files import MAX_TEXT, Text
from archive.records import Node
from search.stats import MAX_ENUMERATED_FLIPS, paired_p
from services.errors import UserError
from services.workspace import RunRepo

MAX_CHANGED_SHOWN = 500


def compare_page(reader: RunReader, data: RunData, a: Node, b: Node) -> str:
    name = data.name
    body = join([
        h("h1", {}, f"Node {a.node_id} and node {b.node_id}"),
        compare_form(data, a.node_id, b.node_id),
        h("h2", {}, "Summary"), outcome_summary(reader, a, b),
        h("h2", {}, "Scores"), scores_side_by_side(data, a, b),
        h("h2", {}, "Paired test on the rows both answered"), paired_tests(reader, a, b),
        h("h2", {}, f"Code: from {a.node_id} to {b.node_id}"), diff_block(code_diff(reader, a, b), "code-diff"),
        h("h2", {}, "Rows whose prediction changed"), changed_rows(reader, a, b)])
    return page(f"{a.node_id} vs {b.node_id}: {name}", body,
                [("runs", "/"), (name, url("runs", name)), (f"{a.node_id} vs {b.node_id}", None)],
                url("runs", name, "live"), reader.version())


def scores_side_by_side(data: RunData, a: Node, b: Node) -> Markup:
    rows = []
    for domain, split in pieces.splits_of(data):
        va, vb = a.scores.get(domain, {}).get(split), b.scores.get(domain, {}).get(split)
        if va is None and vb is None:
            continue
        delta = "" if va is None or vb is None else f"{vb - va:+.3f}"
        rows.append(h("tr", {}, h("td", {}, domain), h("td", {}, split),
                      h("td", {"class": "num"}, pieces.fmt_score(va), pieces.score_note(a, domain, split)),
                      h("td", {"class": "num"}, pieces.fmt_score(vb), pieces.score_note(b, domain, split)),
                      h("td", {"class": "num delta"}, delta)))
    head = h("tr", {}, join(h("th", {}, c) for c in ("domain", "split", a.node_id, b.node_id, "change")))
    return h("table", {"class": "scores"}, head, join(rows)) if rows else h("p", {"class": "empty"},
                                                                              "Neither node was scored.")


def paired_tests(reader: RunReader, a: Node, b: Node) -> Markup:
    """Per domain and split both evaluated: the p-value of search.stats.paired_p (the test the
    promotion rules use) on the rows both reports scored, two-sided (the page compares any two
    nodes, with no direction chosen before looking)."""
    rows = []
    for domain, split, key_a, key_b in split_pairs(a, b):
        score_key = getattr(known_domain(domain), "score_key", None)
        if score_key is None:
            continue
        xa, xb = paired_rows(reader, key_a, key_b, score_key)
        if not xa:
            rows.append(h("tr", {}, h("td", {}, domain), h("td", {}, split), h("td", {"class": "num"}, 0),
                          h("td", {"colspan": 4, "class": "empty"}, "no row both reports scored")))
            continue
        rows.append(h("tr", {"class": "paired"}, h("td", {}, domain), h("td", {}, split),
                      h("td", {"class": "num shared"}, len(xa)),
                      h("td", {"class": "num"}, f"{sum(xa) / len(xa):.3f}"),
                      h("td", {"class": "num"}, f"{sum(xb) / len(xb):.3f}"), h("td", {}, test_named(xa, xb)),
                      h("td", {"class": "num p-value"}, f"{paired_p(xb, xa, 'two-sided', 'exact'):.4g}")))
    if not rows:
        return h("p", {"class": "empty"}, "No split both nodes were scored on, row by row.")
    head = h("tr", {}, join(h("th", {}, c) for c in ("domain", "split", "shared rows", f"{a.node_id} on them",
                                                      f"{b.node_id} on them", "test", "p, two-sided")))
    return h("table", {"class": "paired-tests"}, head, join(rows)) + h(
        "p", {"class": "note"}, "The null hypothesis: neither node scores higher on these rows. A small p says the "
                                "difference is unlikely to be noise of the rows drawn; with many splits or pairs "
                                "looked at, some small p's come by chance.")


def test_named(xa: list[float], xb: list[float]) -> str:
    """The test paired_p(method="exact") runs on these rows, in words."""
    discordant = sum(1 for x, y in zip(xa, xb) if x != y)
    if all(v in (0.0, 1.0) for v in xa + xb):
        return f"exact sign test (McNemar) on the {discordant} rows that differ"
    exact = "every sign pattern" if discordant <= MAX_ENUMERATED_FLIPS else "2,000 seeded sign patterns"
    return f"sign-flip permutation test of the summed differences on the {discordant} rows that differ ({exact})"


def code_diff(reader: RunReader, a: Node, b: Node) -> Text:
    """The diff between the two nodes' commits, read from the run's own repository."""
    if a.commit is None or b.commit is None:
        return Text(missing="a node without a commit of its own (no change, or not captured)")
    try:
        text = RunRepo(reader.path / "repo").diff(a.commit, b.commit)
    except subprocess.TimeoutExpired:
        return Text(missing="the change is too large to diff in time: compare the two nodes' files instead")
    except UserError as e:  # a repository whose files would steer git (services/git_safety.py)
        return Text(missing=str(e))
    except (OSError, subprocess.CalledProcessError) as e:
        return Text(missing=f"the run's repository could not tell ({type(e).__name__})")
    if not text:
        return Text(missing="the two commits hold the same code")
    return Text(text[:MAX_TEXT], len(text) > MAX_TEXT)


def changed_rows(reader: RunReader, a: Node, b: Node) -> Markup:
    """Per domain and split both evaluated: the rows in common whose prediction differs."""
    parts = []
    for domain, split, key_a, key_b in split_pairs(a, b):
        common, outcomes = row_outcomes(reader, key_a, key_b)
        changed = [(pair, v) for pair, v in zip(common, outcomes) if pair[0]["prediction"] != pair[1]["prediction"]]
        verdicts = [v for _, v in changed]
        line = (f"{domain} {split}: {len(common)} rows in common, {len(changed)} changed: "
                f"{verdicts.count('better')} better, {verdicts.count('worse')} worse")
        body = join(h("tr", {"class": v}, h("td", {}, ra["id"]), h("td", {"class": "pred"}, ra["prediction"][:300]),
                      h("td", {"class": "pred"}, rb["prediction"][:300]), h("td", {}, v))
                    for (ra, rb), v in changed[:MAX_CHANGED_SHOWN])
        head = h("tr", {}, join(h("th", {}, c) for c in ("row", a.node_id, b.node_id, "outcome")))
        parts.append(h("h3", {"class": "changed-summary"}, line) +
                     (h("table", {"class": "changed"}, head, body) if changed else Markup("")))
    return join(parts) or h("p", {"class": "empty"}, "The two nodes share no evaluated split.")


def split_pairs(a: Node, b: Node) -> list[tuple[str, str, str, str]]:
    """(domain, split, a's evaluation key, b's) for each split both nodes were evaluated on, in b's order."""
    return [(domain, split, key_a, key_b) for domain, keys in b.eval_keys.items() for split, key_b in keys.items()
            if (key_a := a.eval_key(domain, split)) is not None]


def row_outcomes(reader: RunReader, key_a: str, key_b: str) -> tuple[list[tuple[dict, dict]], list[str]]:
    """The rows both evaluations answered, as (a's row, b's row) in b's order, and the verdict on each
    (better, worse, same; unscored while either has no report)."""
    rows_a, failed_a = reader.split_rows(key_a)
    rows_b, failed_b = reader.split_rows(key_b)
    by_id = {r["id"]: r for r in rows_a}
    common = [(by_id[r["id"]], r) for r in rows_b if r["id"] in by_id]
    return common, [_verdict(ra["id"], failed_a, failed_b) for ra, _ in common]


def paired_rows(reader: RunReader, key_a: str, key_b: str, score_key: str) -> tuple[list[float], list[float]]:
    """The two evaluations' scores on the rows both reports scored, row by row."""
    rows_a, rows_b = reader.row_scores(key_a, score_key) or {}, reader.row_scores(key_b, score_key) or {}
    shared = sorted(set(rows_a) & set(rows_b))
    return [rows_a[i] for i in shared], [rows_b[i] for i in shared]


def outcome_summary(reader: RunReader, a: Node, b: Node) -> Markup:
    """Before the long lists, a line per split both nodes were evaluated on: how the rows both answered
    moved (better: right now and wrong before; worse: the reverse; same: the verdict held), how many
    predictions changed, the score's change, and the p of the paired test below."""
    rows = []
    for domain, split, key_a, key_b in split_pairs(a, b):
        common, outcomes = row_outcomes(reader, key_a, key_b)
        changed = sum(1 for ra, rb in common if ra["prediction"] != rb["prediction"])
        counts = [("?" if "unscored" in outcomes else outcomes.count(v)) for v in ("better", "worse", "same")]
        score_key = getattr(known_domain(domain), "score_key", None)
        xa, xb = paired_rows(reader, key_a, key_b, score_key) if score_key else ([], [])
        va, vb = a.scores.get(domain, {}).get(split), b.scores.get(domain, {}).get(split)
        rows.append(h("tr", {"class": "outcome", "data-split": f"{domain} {split}"},
                      h("td", {}, domain), h("td", {}, split), h("td", {"class": "num common"}, len(common)),
                      join(h("td", {"class": f"num {v}"}, n) for v, n in zip(("better", "worse", "same"), counts)),
                      h("td", {"class": "num changed"}, changed),
                      h("td", {"class": "num delta"}, "" if va is None or vb is None else f"{vb - va:+.3f}"),
                      h("td", {"class": "num p-value"}, f"{paired_p(xb, xa, 'two-sided', 'exact'):.4g}" if xa else "")))
    if not rows:
        return h("p", {"class": "empty", "id": "compare-summary"}, "The two nodes share no evaluated split.")
    head = h("tr", {}, join(h("th", {}, c) for c in ("domain", "split", "rows both answered", "better", "worse",
                                                      "same", "predictions changed", "score change",
                                                      "p, two-sided")))
    return h("table", {"class": "outcomes", "id": "compare-summary"}, head, join(rows)) + h(
        "p", {"class": "note"}, f"Better: right for {b.node_id}, wrong for {a.node_id}; worse: the reverse; same: "
                                "the verdict held. The rows themselves, and the test, are below.")


def _verdict(row: str, failed_a: set[str] | None, failed_b: set[str] | None) -> str:
    if failed_a is None or failed_b is None:
        return "unscored"
    was, now = row not in failed_a, row not in failed_b
    return "better" if now and not was else "worse" if was and not now else "same"
