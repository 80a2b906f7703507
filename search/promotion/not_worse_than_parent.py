"""not_worse_than_parent: the floor, and no significant evidence, by a one-sided paired test at
`loop.promotion_level` on the rows both answered, that the child is worse than its parent."""

from __future__ import annotations

from search.promotion import Compared, Promotion, Verdict
from search.racing import Target
from search.stats import paired_p


class NotWorseThanParent(Compared):
    def compare(self, promotion: Promotion, mine: list[float], theirs: list[float]) -> Verdict:
        p = paired_p(mine, theirs, "less", promotion.test)
        worse = p < promotion.level
        return Verdict(not worse, f"{'worse' if worse else 'not worse'} than parent: {sum(mine) / len(mine):.2f} "
                                  f"vs {sum(theirs) / len(theirs):.2f} on {len(mine)} shared rows, "
                                  f"p={p:.2g} {'<' if worse else '>='} {promotion.level:g}")

    def race_bar(self, parent: Target | None, best_low: float | None) -> Target | None:
        """What a child racing its full evaluation must reach to pass this rule (search/racing.py): its
        parent, so a child that may be as good as its parent gets a full score."""
        return parent

    def plan(self, above: str, promotion: Promotion) -> str:
        return f"{above} and not worse than its parent at level {promotion.level:g}, {promotion.test} test"


STRATEGY = NotWorseThanParent()
