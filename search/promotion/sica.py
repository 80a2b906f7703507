"""sica: the floor, and the child's mean at least the lower bound of the best node's confidence interval
(`search.sica.confidence`) on the rows both answered: within noise of the best so far, not merely above zero."""

from __future__ import annotations

from dataclasses import dataclass

from search.promotion import Compared, Promotion, Verdict, check_share
from search.racing import Target
from search.stats import interval


@dataclass(frozen=True)
class Settings:
    confidence: float = 0.95  # the best node's interval whose low end a child must reach

    def __post_init__(self) -> None:
        check_share("confidence", self.confidence)


DEFAULT = Settings()


class Sica(Compared):
    reads_best = True
    Settings = Settings

    def __init__(self, settings: Settings = DEFAULT) -> None:
        self.settings = settings

    def configured(self, settings: Settings) -> Sica:
        return Sica(settings)

    def compare(self, promotion: Promotion, mine: list[float], theirs: list[float]) -> Verdict:
        confidence = self.settings.confidence
        band = interval(theirs, confidence)
        mean = sum(mine) / len(mine)
        ok = mean >= band.low
        return Verdict(ok, f"sica: {mean:.2f} {'>=' if ok else '<'} {band.low:.2f}, the low end of the best "
                           f"node's {confidence:.0%} interval {band.mean:.2f} [{band.low:.2f}, "
                           f"{band.high:.2f}] on {len(mine)} shared rows")

    def race_bar(self, parent: Target | None, best_low: float | None) -> Target | None:
        """What a child racing its full evaluation must reach to pass this rule (search/racing.py): the low
        end of the best node's 95% interval on the split it is selected on."""
        return None if best_low is None else Target(best_low, f"the low end {best_low:.3f} of the best node's interval")

    def plan(self, above: str, promotion: Promotion) -> str:
        return f"{above} and its mean reaches the best node's {self.settings.confidence:.0%} lower bound (sica)"


STRATEGY = Sica()
