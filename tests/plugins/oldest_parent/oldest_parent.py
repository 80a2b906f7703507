"""A parent selection strategy from outside the project: always the oldest node that may be a parent (a
breadth-first search from the initial agent, for as long as it stays a candidate)."""

from search.parent_selection import Candidate, Context, Pointed


class Oldest(Pointed):
    def pick(self, candidates: list[Candidate], context: Context) -> Candidate:
        return min(candidates, key=lambda c: c.order)


class NotAStrategy:
    """Named by an entry point of the group, but without the methods a strategy has."""
