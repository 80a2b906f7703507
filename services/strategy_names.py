"""The names of the search's strategies of each kind (search/<kind>/: one file a strategy, its name the
file's; and installed plug-ins, entry point group `hyperagents_imo.<kind>`), listed without importing any:
the config's validation and the command line's choices read them here, below the layer that loads them
(search/registry.py)."""

from __future__ import annotations

import pkgutil
from importlib.metadata import entry_points
from pathlib import Path

SEARCH = Path(__file__).resolve().parent.parent / "search"  # the project's search/ folder

KINDS = ("parent_selection", "promotion", "best_choice", "novelty")


def group(kind: str) -> str:
    """The entry point group of a kind's plug-ins."""
    return f"hyperagents_imo.{kind}"


def bundled_names(kind: str) -> list[str]:
    """The strategies of search/<kind>/, by file name (a file whose name starts with _ is no strategy)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(SEARCH / kind)])
                  if not m.name.startswith("_"))


def plugin_names(kind: str) -> list[str]:
    """The strategies installed plug-ins name, without loading them."""
    return sorted({point.name for point in entry_points(group=group(kind))})


def strategy_names(kind: str) -> tuple[str, ...]:
    """Every strategy of `kind` a run may name: the bundled ones, then the plug-ins' others."""
    bundled = bundled_names(kind)
    return (*bundled, *(name for name in plugin_names(kind) if name not in bundled))
