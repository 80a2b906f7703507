"""paired: over many children the highest of noisy scores is often a lucky one (the winner's curse), so the
nodes are walked in generation order and a node replaces the best so far only when it scores higher and a
one-sided paired test on the rows both were evaluated on finds it better at `search.paired.level`. Two nodes
without shared rows compare by score alone."""

from __future__ import annotations

from dataclasses import dataclass

from search.best_choice import BestChoice, Chain, GradeOf, Node, Rows
from search.parent_selection import TIE_TOLERANCE
from search.promotion import RowScores, Verdict, check_share, check_test, shared
from search.stats import paired_p


@dataclass(frozen=True)
class Settings:
    level: float = 0.05  # a node replaces the best so far when the test's p-value is below this
    test: str = "exact"  # exact (sign test; sign-flip permutation for partial credit) | bootstrap (paired)

    def __post_init__(self) -> None:
        check_share("level", self.level)
        check_test(self.test)


DEFAULT = Settings()


def replaces(score: float, incumbent_score: float, rows: RowScores, incumbent_rows: RowScores,
             settings: Settings = DEFAULT, tolerance: float = TIE_TOLERANCE) -> Verdict:
    """Whether a node (its mean `score`, per-row `rows`) takes the best node's place by a paired test at
    `settings.level` on the rows both have; without shared rows, by score alone."""
    if not score > incumbent_score + tolerance:
        return Verdict(False, f"{score:.3f} <= {incumbent_score:.3f}")
    mine, theirs = shared(rows, incumbent_rows)
    if not mine:
        return Verdict(True, f"{score:.3f} > {incumbent_score:.3f}, no shared rows to pair")
    p = paired_p(mine, theirs, "greater", settings.test)
    better = p < settings.level
    return Verdict(better, f"{sum(mine) / len(mine):.2f} vs {sum(theirs) / len(theirs):.2f} on {len(mine)} shared "
                           f"rows, p={p:.2g} {'<' if better else '>='} {settings.level:g}")


class Paired(Chain):
    reads_rows = True
    Settings = Settings

    def __init__(self, settings: Settings = DEFAULT) -> None:
        self.settings = settings

    def configured(self, settings: Settings) -> Paired:
        return Paired(settings)

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
        return replaces(node[0], best[0], rows(node[1]), rows(best[1]), self.settings, choice.tolerance).promote

    def note(self, choice: BestChoice) -> str:
        return f"chosen by paired tests at level {self.settings.level:g}"


STRATEGY = Paired()
