"""score_above (the default): the stage's floor alone, the paper's rule."""

from __future__ import annotations

from search.promotion import Promotion, RowScores, Verdict


class ScoreAbove:
    reads_best = False

    def verdict(self, promotion: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
                floor: str) -> Verdict:
        return Verdict(True, floor)

    def plan(self, above: str, promotion: Promotion) -> str:
        return above


STRATEGY = ScoreAbove()
