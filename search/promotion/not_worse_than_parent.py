"""not_worse_than_parent: the floor, and no significant evidence, by a one-sided paired test at
`search.not_worse_than_parent.level` on the rows both answered, that the child is worse than its parent."""

from __future__ import annotations

from dataclasses import dataclass

from search.promotion import Compared, Promotion, Verdict, check_share, check_test
from search.racing import Target
from search.stats import paired_p


@dataclass(frozen=True)
class Settings:
    level: float = 0.05  # a child is refused when the test's p-value is below this
    test: str = "exact"  # exact (sign test; sign-flip permutation for partial credit) | bootstrap (paired)

    def __post_init__(self) -> None:
        check_share("level", self.level)
        check_test(self.test)


DEFAULT = Settings()


class NotWorseThanParent(Compared):
    Settings = Settings

    def __init__(self, settings: Settings = DEFAULT) -> None:
        self.settings = settings

    def configured(self, settings: Settings) -> NotWorseThanParent:
        return NotWorseThanParent(settings)

    def compare(self, promotion: Promotion, mine: list[float], theirs: list[float]) -> Verdict:
        level = self.settings.level
        p = paired_p(mine, theirs, "less", self.settings.test)
        worse = p < level
        return Verdict(not worse, f"{'worse' if worse else 'not worse'} than parent: {sum(mine) / len(mine):.2f} "
                                  f"vs {sum(theirs) / len(theirs):.2f} on {len(mine)} shared rows, "
                                  f"p={p:.2g} {'<' if worse else '>='} {level:g}")

    def race_bar(self, parent: Target | None, best_low: float | None) -> Target | None:
        """What a child racing its full evaluation must reach to pass this rule (search/racing.py): its
        parent, so a child that may be as good as its parent gets a full score."""
        return parent

    def plan(self, above: str, promotion: Promotion) -> str:
        return f"{above} and not worse than its parent at level {self.settings.level:g}, {self.settings.test} test"


STRATEGY = NotWorseThanParent()
