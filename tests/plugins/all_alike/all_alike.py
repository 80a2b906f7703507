"""A novelty measure from outside the project: any two changes are entirely alike, so with a threshold set
every child after the first that changed something is a duplicate."""

from search.novelty import Measure


class AllAlike(Measure):
    def similarity(self, a: object, b: object) -> float:
        return 1.0
