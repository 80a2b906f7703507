"""Pictures of a run, redrawn after every node: progress per domain and split, and the archive tree.

- `progress_<domain>_<split>.png`: per generation, the archive's average score, the best
  score so far, and the scores along the lineage of the final best node. Only nodes with
  the full evaluation count: a 10-row staged score is not comparable.
- `archive_tree.png`: every node at its generation, joined to its parent, coloured by
  its selection score (grey: never scored), the best node starred.
"""

from __future__ import annotations

from pathlib import Path

from archive.records import Node
from archive.store import Archive, mean_score


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


def write_plots(archive: Archive, domains: list, full_sizes: dict[str, int], best_id: str | None,
                out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

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
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right")
            path = out_dir / f"progress_{domain.name}_{split}.png"
            fig.savefig(path, dpi=100, bbox_inches="tight")
            plt.close(fig)
            written.append(path)
    written.append(_tree(archive, domains, full_sizes, best_id, out_dir / "archive_tree.png", plt))
    return written


def _tree(archive: Archive, domains, full_sizes, best_id, path: Path, plt) -> Path:
    from matplotlib.ticker import MaxNLocator

    nodes = archive.ordered()
    rows: dict[int, int] = {}
    position = {}
    for node in nodes:  # one column per generation, nodes stacked in creation order
        position[node.node_id] = (node.generation, rows.get(node.generation, 0))
        rows[node.generation] = rows.get(node.generation, 0) + 1
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), max(3, 0.6 * max(rows.values(), default=1))))
    for node in nodes:
        if node.parent in position:
            (x0, y0), (x1, y1) = position[node.parent], position[node.node_id]
            ax.plot([x0, x1], [y0, y1], color="#999999", linewidth=1, zorder=1)
    scores = {n.node_id: mean_score(n, domains, full_sizes) if n.valid_parent else None for n in nodes}
    scored = [n for n in nodes if scores[n.node_id] is not None]
    unscored = [n for n in nodes if scores[n.node_id] is None]
    if scored:
        dots = ax.scatter([position[n.node_id][0] for n in scored], [position[n.node_id][1] for n in scored],
                          c=[scores[n.node_id] for n in scored], cmap="viridis", s=160, zorder=2)
        fig.colorbar(dots, ax=ax, label="selection score")
    ax.scatter([position[n.node_id][0] for n in unscored], [position[n.node_id][1] for n in unscored],
               color="#cccccc", s=160, zorder=2, label="not a valid parent")
    for node in nodes:
        ax.annotate(node.node_id, position[node.node_id], ha="center", va="center", fontsize=7, zorder=3)
    if best_id in position:
        ax.scatter(*position[best_id], marker="*", s=500, facecolors="none", edgecolors="red", zorder=4,
                   label=f"best: {best_id}")
    ax.set(xlabel="generation", yticks=[], title="archive")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", fontsize=8)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
