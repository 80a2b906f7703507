"""`report.html`: one page per run with the plots, the top nodes and links to what they did."""

from __future__ import annotations

import html
from pathlib import Path

from archive.store import META_TRANSCRIPT, UNTRUSTED, Archive, mean_score
from services.fsutil import atomic_write_text

TOP = 15  # nodes in the table


def write_report(archive: Archive, domains: list, full_sizes: dict[str, int], best_id: str | None,
                 images: list[Path], out: Path) -> Path:
    nodes = sorted(archive.nodes.values(), key=lambda n: (n.valid_parent, mean_score(n, domains, full_sizes),
                                                          n.generation), reverse=True)
    splits = [(d.name, s) for d in domains for s in d.full_splits(with_test=True)]
    head = "".join(f"<th>{html.escape(d)}<br>{s}</th>" for d, s in splits)
    rows = []
    for node in nodes[:TOP]:
        cells = []
        for d, s in splits:
            value = node.scores.get(d, {}).get(s)
            rows_scored = node.samples.get(d, {}).get(s)
            cells.append(f"<td>{'' if value is None else f'{value:.3f}'}"
                         f"{f' <small>({rows_scored})</small>' if rows_scored else ''}</td>")
        links = [f'<a href="{path}">{label}</a>'
                 for path, label in ((f"nodes/{node.node_id}/patch.diff", "patch"),
                                     (f"{UNTRUSTED}/{node.node_id}/meta/{META_TRANSCRIPT}", "transcript"),
                                     (f"nodes/{node.node_id}/node.json", "record"))
                 if _regular_file(archive.run_dir / path)]
        star = " &#9733;" if node.node_id == best_id else ""
        rows.append(f"<tr><td>{html.escape(node.node_id)}{star}</td><td>{html.escape(str(node.parent))}</td>"
                    f"<td>{node.status}</td>{''.join(cells)}<td>${sum(node.cost_usd.values()):.4f}</td>"
                    f"<td>{' '.join(links)}</td></tr>")
    pictures = "".join(f'<img src="{p.name}" alt="{p.stem}">' for p in images)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(archive.run_dir.name)}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}} td:first-child{{text-align:left}}
img{{max-width:48%;margin:4px;border:1px solid #eee}}</style></head><body>
<h1>Run {html.escape(archive.run_dir.name)}</h1>
<p>{len(archive.nodes)} nodes; best: {html.escape(str(best_id))}. Scores are each domain's score key; the
number of rows scored is in brackets (10 = staged evaluation only).</p>
{pictures}
<h2>Top nodes</h2>
<table><tr><th>node</th><th>parent</th><th>status</th>{head}<th>cost</th><th></th></tr>
{''.join(rows)}
</table></body></html>
"""
    atomic_write_text(out, page)
    return out


def _regular_file(path: Path) -> bool:
    """A file to link to: not a link (an agent may have planted one in its own folder)."""
    return path.is_file() and not path.is_symlink()
