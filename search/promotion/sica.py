"""sica: the floor, and the child's mean at least the lower bound of the best node's confidence interval
on the rows both answered: within noise of the best so far, not merely above zero."""

from __future__ import annotations

from search.promotion import Compared, Promotion, Verdict
from search.racing import Target
from search.stats import interval


class Sica(Compared):
    reads_best = True

    def compare(self, promotion: Promotion, mine: list[float], theirs: list[float]) -> Verdict:
        band = interval(theirs, promotion.confidence)
        mean = sum(mine) / len(mine)
        ok = mean >= band.low
        return Verdict(ok, f"sica: {mean:.2f} {'>=' if ok else '<'} {band.low:.2f}, the low end of the best "
                           f"node's {promotion.confidence:.0%} interval {band.mean:.2f} [{band.low:.2f}, "
                           f"{band.high:.2f}] on {len(mine)} shared rows")

    def race_bar(self, parent: Target | None, best_low: float | None) -> Target | None:
        """What a child racing its full evaluation must reach to pass this rule (search/racing.py): the low
        end of the best node's 95% interval on the split it is selected on."""
        return None if best_low is None else Target(best_low, f"the low end {best_low:.3f} of the best node's interval")

    def plan(self, above: str, promotion: Promotion) -> str:
        return f"{above} and its mean reaches the best node's {promotion.confidence:.0%} lower bound (sica)"


STRATEGY = Sica()
