"""Parent selection over the archive, by a strategy's name or the strategy itself (the strategies:
search/parent_selection/, one file each, and installed plug-ins), and the second parent of a merge
(search/merge_partner/).

Which scores the candidates carry (staged-only and initial nodes) is archive.store's `ScoreRule`. The
randomness comes from the caller's `random.Random`, so a seeded run replays.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from search.merge_partner import MergePartner, lineage
from search.parent_selection import TIE_TOLERANCE, Candidate, Context, ParentSelection, highest
from search.parent_selection import probabilities as chances
from search.parent_selection.islands import island_members
from search.registry import merge_partner_rule, parent_selection

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


def merge_partner(candidates: list[Candidate], first: str, parent_of: Mapping[str, str | None],
                  ties: str = "latest", strategy: str | MergePartner = "complement") -> Candidate | None:
    """The second parent of a merge with `first` under `strategy` (search/merge_partner/: by name, or the
    strategy itself); None for no merge."""
    rule = merge_partner_rule(strategy) if isinstance(strategy, str) else strategy
    return rule.partner(candidates, first, parent_of, ties)
