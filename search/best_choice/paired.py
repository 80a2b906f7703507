"""paired: over many children the highest of noisy scores is often a lucky one (the winner's curse), so the
nodes are walked in generation order and a node replaces the best so far only when it scores higher and a
one-sided paired test on the rows both were evaluated on finds it better at `loop.best_level`. Two nodes
without shared rows compare by score alone."""

from __future__ import annotations

from search.best_choice import BestChoice, Chain, GradeOf, Node, Rows, replaces
from search.promotion import RowScores


class Paired(Chain):
    reads_rows = True

    def choose(self, scored: list[tuple[float, Node]], rows: Rows[Node], choice: BestChoice,
               heldout: GradeOf[Node]) -> Node:
        read: dict[str, RowScores] = {}  # a node's rows are read once, however often the walk compares it

        def once(node: Node) -> RowScores:
            if node.node_id not in read:
                read[node.node_id] = rows(node)
            return read[node.node_id]

        return super().choose(scored, once, choice, heldout)

    def takes(self, choice: BestChoice, node: tuple[float, Node], best: tuple[float, Node], rows: Rows[Node],
              heldout: GradeOf[Node]) -> bool:
        # The test is paid only for a node that scores higher (Chain asks only then).
        return replaces(choice, node[0], best[0], rows(node[1]), rows(best[1])).promote

    def note(self, choice: BestChoice) -> str:
        return f"chosen by paired tests at level {choice.level:g}"


STRATEGY = Paired()
