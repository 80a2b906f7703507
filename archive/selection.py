"""Parent selection over the archive, by a strategy's name or the strategy itself (the strategies:
search/parent_selection/, one file each, and installed plug-ins), and the second parent of a merge.

Which scores the candidates carry (staged-only and initial nodes) is archive.store's `ScoreRule`. The
randomness comes from the caller's `random.Random`, so a seeded run replays.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from search.parent_selection import TIE_TOLERANCE, Candidate, Context, ParentSelection, highest
from search.parent_selection import probabilities as chances
from search.parent_selection.islands import island_members
from search.registry import parent_selection
from services.choices import Ties

NO_CONTEXT = Context()  # generation 0, the default settings

__all__ = ["TIE_TOLERANCE", "Candidate", "Context", "highest", "island_members", "lineage", "merge_partner",
           "needs_rows", "probabilities", "select_parent"]


def probabilities(candidates: list[Candidate], strategy: str | ParentSelection,
                  context: Context = NO_CONTEXT) -> list[float]:
    """Each candidate's chance of being the next parent under `strategy` (uniform when the weights are all 0,
    as in the reference)."""
    return chances(parent_selection(strategy), candidates, context)


def select_parent(candidates: list[Candidate], strategy: str | ParentSelection, rng: random.Random,
                  context: Context = NO_CONTEXT) -> Candidate:
    if not candidates:
        raise ValueError("no node can be a parent: none has a score on every domain")
    return parent_selection(strategy).choose(candidates, rng, context)


def needs_rows(strategy: str | ParentSelection) -> bool:
    """Whether `strategy`'s candidates must carry their per-row scores."""
    return parent_selection(strategy).needs_rows


def lineage(node_id: str, parent_of: Mapping[str, str | None]) -> set[str]:
    """`node_id` and its ancestors."""
    found: set[str] = set()
    current: str | None = node_id
    while current is not None and current not in found:
        found.add(current)
        current = parent_of.get(current)
    return found


def merge_partner(candidates: list[Candidate], first: str, parent_of: Mapping[str, str | None],
                  ties: str = "latest") -> Candidate | None:
    """The second parent of a merge with `first`: a candidate of another lineage (neither its
    ancestor nor its descendant) such that each is better on rows the other is not, the one
    better than `first` on the most rows (then the higher score); None when no candidate
    complements it, or the candidates carry no rows."""
    chosen = next((c for c in candidates if c.node_id == first), None)
    if chosen is None or not chosen.rows:
        return None
    mine = lineage(first, parent_of)
    found = []
    for c in candidates:
        if c.node_id in mine or first in lineage(c.node_id, parent_of):
            continue
        shared = chosen.rows.keys() & c.rows.keys()
        better = sum(c.rows[r] > chosen.rows[r] for r in shared)
        worse = sum(c.rows[r] < chosen.rows[r] for r in shared)
        if better and worse:
            found.append((better, c))
    if not found:
        return None
    newest_first = -1 if ties == Ties.EARLIEST else 1
    return max(found, key=lambda t: (t[0], t[1].score, newest_first * t[1].order))[1]
