"""Merge partner (`loop.merge_partner`, every `loop.merge_every` generations): a merge generation's second parent,
chosen among the candidates for the first one. The meta agent reads the partner's code beside its own and may take
from it.

A strategy has `partner(candidates, first, parent_of, ties)`: the candidate to merge with `first` (its node id),
or None for no merge this generation; `parent_of` maps each node to its parent (for lineages), and `ties` is
`loop.ties`. The candidates carry their per-row scores (`Candidate.rows`). A bundled strategy is a file of this
folder whose `STRATEGY` is an instance; a plug-in names its class or instance under the entry point group
`hyperagents_imo.merge_partner`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from search.parent_selection import Candidate


@runtime_checkable
class MergePartner(Protocol):
    def partner(self, candidates: list[Candidate], first: str, parent_of: Mapping[str, str | None],
                ties: str) -> Candidate | None: ...


def lineage(node_id: str, parent_of: Mapping[str, str | None]) -> set[str]:
    """`node_id` and its ancestors."""
    found: set[str] = set()
    current: str | None = node_id
    while current is not None and current not in found:
        found.add(current)
        current = parent_of.get(current)
    return found
