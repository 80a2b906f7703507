"""heldout: guards against a task agent that learns its grader (models.heldout_grader, archive/heldout.py).
In generation order, a node replaces the best so far only when it scores higher and its held-out grade is
known and not below the best's (a best whose held-out grading failed is passed by score alone). Along the
chain of bests the held-out grade never falls, so small falls cannot add up; the price is that a true gain
the held-out grader's noise hides waits for a node that shows it."""

from __future__ import annotations

from search.best_choice import BestChoice, Chain, GradeOf, Node, Rows


class HeldOut(Chain):
    reads_heldout = True

    def takes(self, choice: BestChoice, node: tuple[float, Node], best: tuple[float, Node], rows: Rows[Node],
              heldout: GradeOf[Node]) -> bool:
        mine, theirs = heldout(node[1]), heldout(best[1])
        return mine is not None and (theirs is None or mine >= theirs)

    def note(self, choice: BestChoice) -> str:
        return "its held-out grade not below an earlier best's"


STRATEGY = HeldOut()
