"""A promotion rule from outside the project: a child that passed the stage's floor goes on only when it
answered more than half of the stage's rows right (a bar of its own, not the parent's or the best's)."""

from search.promotion import Promotion, RowScores, Verdict


class AboveHalf:
    reads_best = False

    def verdict(self, promotion: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
                floor: str) -> Verdict:
        mean = sum(child.values()) / len(child)
        return Verdict(mean > 0.5, f"{floor}; above_half: {mean:.2f} {'>' if mean > 0.5 else '<='} 0.5")

    def plan(self, above: str, promotion: Promotion) -> str:
        return f"{above} and above half of the rows right (above_half)"
