"""latest: the newest node."""

from __future__ import annotations

from search.parent_selection import Candidate, Context, Pointed


class Latest(Pointed):
    def pick(self, candidates: list[Candidate], context: Context) -> Candidate:
        return max(candidates, key=lambda c: c.order)


STRATEGY = Latest()
