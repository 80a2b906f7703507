"""highest (the paper's): the highest selection score; among equals (within `loop.tie_tolerance`) the latest
node, or with `loop.ties: earliest` the earliest (the reference's `max` over the archive in order, tolerance
0)."""

from __future__ import annotations

from search.best_choice import BestChoice, GradeOf, Node, Rows
from search.parent_selection import highest


class Highest:
    reads_rows = False
    reads_heldout = False

    def choose(self, scored: list[tuple[float, Node]], rows: Rows[Node], choice: BestChoice,
               heldout: GradeOf[Node]) -> Node:
        return highest(scored, lambda t: t[0], lambda t: t[1].generation, choice.ties, choice.tolerance)[1]

    def note(self, choice: BestChoice) -> str:
        return ""


STRATEGY = Highest()
