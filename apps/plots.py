"""Pictures of a run, redrawn after every node: progress per domain and split, and the archive tree.

- `progress_<domain>_<split>.png`: per generation, the archive's average score, the best
  score so far, and the scores along the lineage of the final best node. Only nodes with
  the full evaluation count: a 10-row staged score is not comparable.
- `heldout_gap.png` (with models.heldout_grader): per generation, the best node's grade by the grader
  the run optimizes against and by the held-out grader, on the same proofs, and every graded node's
  two grades as dots (archive/heldout.py).
- `archive_tree.png`: the tree as report.html draws it (apps.dashboard.svg.layout: depth
  down, a parent over its children), coloured by selection score (grey: never scored), the
  best node's lineage drawn thick and the best node starred. The figure grows with the tree
  up to a page's size; past that the layout is drawn closer and the dots smaller.

Axis ticks are apps.dashboard.svg.nice_ticks, as on every chart of the project.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from apps.dashboard.svg import LABEL_ALL, TreeNode, layout, nice_ticks
from archive.heldout import HeldOutRecord, read_heldout
from archive.records import Node
from archive.store import Archive, mean_score
from services.fsutil import atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from domains.base import Domain

TREE_MAX_INCHES = (16.0, 10.0)  # the tree figure's largest width and height (1,600 x 1,000 pixels at 100 dpi)


def _lineage(archive: Archive, node_id: str | None) -> list[Node]:
    path = []
    while node_id is not None and node_id in archive.nodes:
        path.append(archive.nodes[node_id])
        node_id = archive.nodes[node_id].parent
    return path[::-1]


def progress_series(archive: Archive, domain: str, split: str, best_id: str | None) -> dict[str, list]:
    """Per generation: average of all full-evaluation scores so far, best so far, best lineage."""
    by_generation: dict[int, list[float]] = {}
    for node in archive.nodes.values():
        score = node.scores.get(domain, {}).get(split)
        if node.full_eval.get(domain) and score is not None:
            by_generation.setdefault(node.generation, []).append(score)
    generations, average, best, seen = [], [], [], []
    for generation in sorted(by_generation):
        seen += by_generation[generation]
        generations.append(generation)
        average.append(sum(seen) / len(seen))
        best.append(max(seen))
    lineage = [(n.generation, n.scores[domain][split]) for n in _lineage(archive, best_id)
               if n.full_eval.get(domain) and n.scores.get(domain, {}).get(split) is not None]
    return {"generation": generations, "average": average, "best": best, "lineage": lineage}


def write_plots(archive: Archive, domains: list[Domain], full_sizes: dict[str, int], best_id: str | None,
                out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    last = max((n.generation for n in archive.nodes.values()), default=0)
    written = []
    for domain in domains:
        for split in domain.full_splits():
            series = progress_series(archive, domain.name, split, best_id)
            if not series["generation"]:
                continue
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.plot(series["generation"], series["average"], marker=".", label="archive average")
            ax.plot(series["generation"], series["best"], marker=".", label="best agent")
            if series["lineage"]:
                gens, scores = zip(*series["lineage"])
                ax.plot(gens, scores, marker="o", linestyle="--", label=f"lineage of node {best_id}")
            ax.set(xlabel="generation", ylabel=f"{domain.score_key} ({split})", title=f"{domain.name}: {split}")
            values = series["average"] + series["best"] + [score for _, score in series["lineage"]]
            _ticks(ax.set_xticks, ax.set_xlim, nice_ticks(0, last, 8, integer=True))
            _ticks(ax.set_yticks, ax.set_ylim, nice_ticks(min(0.0, *values), max(values), 6))  # as report.html
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right")
            path = out_dir / f"progress_{domain.name}_{split}.png"
            _save(fig, path)
            plt.close(fig)
            written.append(path)
    record = read_heldout(archive.run_dir)
    if record is not None and record.generations:
        written.append(_heldout(record, last, out_dir / "heldout_gap.png"))
    if archive.nodes:  # a run stopped before its initial node was recorded has no tree yet
        written.append(_tree(archive, domains, full_sizes, best_id, out_dir / "archive_tree.png"))
    return written


def _save(fig: Figure, path: Path) -> None:
    """`fig` as the PNG `path`, written whole (fsutil.atomic_write_bytes): a link planted at that name in a
    handed run folder is replaced, never written through as savefig would."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


def _heldout(record: HeldOutRecord, last: int, path: Path) -> Path:
    import matplotlib.pyplot as plt  # already loaded, on the backend write_plots chose

    grades = [g for g in record.grades if g.model == record.model]
    fig, ax = plt.subplots(figsize=(7, 4))
    graders = ", ".join(dict.fromkeys(g.grader for g in grades))
    for which, label, colour in (("optimized", f"optimized grader ({graders})", "#1565c0"),
                                 ("heldout", f"held-out grader ({record.model})", "#c62828")):
        steps = [(e.generation, v) for e in record.generations if (v := getattr(e, which)) is not None]
        if steps:
            gens, values = zip(*steps)
            ax.step(gens, values, where="post", color=colour, label=label)
        dots = [(g.generation, v) for g in grades if (v := getattr(g, which)) is not None]
        if dots:
            ax.scatter(*zip(*dots), color=colour, s=14, alpha=0.6)
    ax.set(xlabel="generation", ylabel="grade of the same proofs",
           title="the best node's proofs by two graders, per generation (dots: every node graded)")
    _ticks(ax.set_xticks, ax.set_xlim, nice_ticks(0, last, 8, integer=True))
    _ticks(ax.set_yticks, ax.set_ylim, nice_ticks(0.0, 1.0, 6))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, path)
    plt.close(fig)
    return path


def _ticks(set_ticks: Callable[[list[float]], object], set_limits: Callable[[float, float], object],
           ticks: list[float]) -> None:
    """An axis from its first round tick to its last, with a little room so a dot on either end shows whole."""
    room = (ticks[-1] - ticks[0]) * 0.03
    set_ticks(ticks)
    set_limits(ticks[0] - room, ticks[-1] + room)


def _tree(archive: Archive, domains: list[Domain], full_sizes: dict[str, int], best_id: str | None, path: Path) -> Path:
    import matplotlib.pyplot as plt  # already loaded, on the backend write_plots chose

    nodes = archive.ordered()
    where = layout([TreeNode(n.node_id, n.parent, n.generation, str(n.status), None, "") for n in nodes])
    wide, deep = max(x for x, _ in where.values()) + 1, max(y for _, y in where.values()) + 1
    width, height = min(max(6.0, 0.45 * wide), TREE_MAX_INCHES[0]), min(max(3.0, 0.8 * deep), TREE_MAX_INCHES[1])
    spacing = min(width / wide, height / deep) * 72  # points between neighbours
    dot = min(max(0.6 * spacing, 3.0), 12.0)  # a dot's diameter in points
    fig, ax = plt.subplots(figsize=(width, height))
    lineage = {n.node_id for n in _lineage(archive, best_id)}
    for node in nodes:
        if node.parent in where:
            (x0, y0), (x1, y1) = where[node.parent], where[node.node_id]
            best_edge = node.node_id in lineage and node.parent in lineage
            ax.plot([x0, x1], [y0, y1], color="#1565c0" if best_edge else "#b0b6c3",
                    linewidth=2.5 if best_edge else 0.8, zorder=1)
    scores = {n.node_id: mean_score(n, domains, full_sizes) for n in nodes if n.valid_parent}
    scored = [n for n in nodes if n.node_id in scores]
    unscored = [n for n in nodes if n.node_id not in scores]
    if scored:
        dots = ax.scatter([where[n.node_id][0] for n in scored], [where[n.node_id][1] for n in scored],
                          c=[scores[n.node_id] for n in scored], cmap="viridis", s=dot ** 2, zorder=2)
        fig.colorbar(dots, ax=ax, label="selection score", fraction=0.04)
    ax.scatter([where[n.node_id][0] for n in unscored], [where[n.node_id][1] for n in unscored],
               color="#cccccc", s=dot ** 2, zorder=2, label="not a valid parent")
    for node in nodes:  # labels where they have room, else on the best lineage only
        if (len(nodes) <= LABEL_ALL and spacing >= 14) or node.node_id in lineage:
            ax.annotate(node.node_id, where[node.node_id], xytext=(0, -dot / 2 - 1), textcoords="offset points",
                        ha="center", va="top", fontsize=7, zorder=3)
    if best_id in where:
        ax.scatter(*where[best_id], marker="*", s=(2.2 * dot) ** 2, facecolors="none", edgecolors="red", zorder=4,
                   label=f"best: {best_id}")
    ax.set_xlim(-0.5, wide - 0.5)
    ax.set_ylim(deep - 0.4, -0.6)  # depth down, room for the labels under the deepest dots
    ax.set_axis_off()
    ax.set_title(f"archive: {len(nodes)} nodes")
    ax.legend(loc="upper left", fontsize=8, markerscale=0.6)
    _save(fig, path)
    plt.close(fig)
    return path
