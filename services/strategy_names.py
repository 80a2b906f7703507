"""The names of the search's strategies of each kind (search/<kind>/: one file a strategy, its name the
file's; and installed plug-ins, entry point group `hyperagents_imo.<kind>`), listed without importing any:
the config's validation and the command line's choices read them here, below the layer that loads them
(search/registry.py)."""

from __future__ import annotations

import pkgutil
import re
from functools import cache
from importlib.metadata import EntryPoint, distributions
from pathlib import Path

SEARCH = Path(__file__).resolve().parent.parent / "search"  # the project's search/ folder

# Each kind, and the loop's config key that names a run's strategy of it.
CONFIG_KEYS = {"parent_selection": "parent_selection", "promotion": "promotion", "best_choice": "best_choice",
               "novelty": "novelty_measure", "meta_model_choice": "meta_bandit", "merge_partner": "merge_partner"}
KINDS = tuple(CONFIG_KEYS)


def group(kind: str) -> str:
    """The entry point group of a kind's plug-ins."""
    return f"hyperagents_imo.{kind}"


def bundled_names(kind: str) -> list[str]:
    """The strategies of search/<kind>/, by file name (a file whose name starts with _ is no strategy)."""
    return list(_bundled(kind))


@cache
def _bundled(kind: str) -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules([str(SEARCH / kind)]) if not m.name.startswith("_")))


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a plug-in's name as a strategy (others are not listed)


def plugin_points(kind: str) -> tuple[EntryPoint, ...]:
    """The entry points installed plug-ins name for `kind`, without loading them: only names shaped like a
    strategy's (NAME), so a name is safe to print and to type; a package whose entry_points.txt does not parse
    adds none (its problem, not this command's)."""
    return _installed_points().get(group(kind), ())


@cache
def _installed_points() -> dict[str, tuple[EntryPoint, ...]]:
    """The entry points of every kind's group, read once a process (a scan of every installed package's
    metadata; the config's validation, every stage's verdict and every best choice ask for the names)."""
    groups = {group(kind): [] for kind in KINDS}
    for dist in distributions():  # in the order of sys.path: the first of one name is the one imported
        try:
            points = [p for p in dist.entry_points if p.group in groups]
        except Exception:  # each installed package's metadata is its writer's: one that does not parse is left out
            continue
        for point in points:
            if NAME.fullmatch(point.name):
                groups[point.group].append(point)
    return {name: tuple(points) for name, points in groups.items()}


def plugin_names(kind: str) -> list[str]:
    """The strategies installed plug-ins name, without loading them."""
    return sorted({point.name for point in plugin_points(kind)})


GIVEN: dict[str, dict[str, object]] = {kind: {} for kind in KINDS}  # kind -> name -> a strategy the API was given


def strategy_names(kind: str) -> tuple[str, ...]:
    """Every strategy of `kind` a run may name: the bundled ones, then the plug-ins' others, then those this
    process was given as objects through the Python API (search.registry.use)."""
    bundled = bundled_names(kind)
    plugins = [name for name in plugin_names(kind) if name not in bundled]
    return (*bundled, *plugins, *(name for name in GIVEN[kind] if name not in bundled and name not in plugins))
