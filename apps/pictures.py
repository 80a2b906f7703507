"""What a run draws after its nodes: the plots (apps/plots.py) and report.html (apps/report.py).

When to draw is the loop's (optimizer.events.Pictures: after a node, at most every
`loop.pictures_every_s`); what to draw is here, above the loop, so the entry points
(run_optimization, hyperagents) hand `draw` to `optimizer.launch.launch`. matplotlib is imported by
the first drawing, not by this module."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from apps.plots import write_plots
from apps.report import write_report

if TYPE_CHECKING:
    from archive.store import Archive
    from domains.base import Domain


def draw(archive: Archive, domains: list[Domain], full_sizes: dict[str, int], best_id: str | None,
         run_dir: Path) -> None:
    """The run's plots and report.html, drawn again from its archive (`best_id`: the run's best node)."""
    write_plots(archive, domains, full_sizes, best_id, run_dir)
    write_report(run_dir, run_dir / "report.html")
