"""best: the node of the highest score; of equal ones (within `loop.tie_tolerance`) the latest, or with
`loop.ties: earliest` the earliest, as the reference's `max` over the archive in order."""

from __future__ import annotations

from search.parent_selection import Candidate, Context, Pointed, best_of


class Best(Pointed):
    def pick(self, candidates: list[Candidate], context: Context) -> Candidate:
        return best_of(candidates, context)


STRATEGY = Best()
