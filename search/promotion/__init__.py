"""Promotion: whether a screening stage lets a child go on to the next, costlier evaluation.

The HyperAgents paper promotes a child whose screening score is above 0; on 10 rows that promotes by luck
as often as by merit. The other rules compare the child with its parent, or with the best node so far, on
the rows both answered (the same questions, so the comparison is paired and the rows' own difficulty
cancels out). Every rule first requires the stage's floor (archive.promotion.decide): a child scoring 0 on
screening is broken whatever its parent did.

A rule is an object with `verdict` (its verdict on a child that passed the floor, from the child's per-row
scores, its parent's and the best node's, each None when unknown), `reads_best` (whether the verdict
compares with the best node, whose id the loop then adds to the verdict's line) and `plan` (when it lets a
child on, in words, for the plan); optionally `race_bar(parent, best_low)`, the target a racing child must
reach to pass the rule (search.racing.Target) (search/racing.py; without it, the rule sets no bar of its own);
`Compared` is the base of a rule that compares with the parent or the
best node on their shared rows. A bundled rule is a file of this folder whose `STRATEGY` is an instance;
a plug-in names its class or instance under the entry point group `hyperagents_imo.promotion`
(docs/search.md). `loop.promotion`, or a stage's third item in `loop.stages`, chooses one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

TESTS = ("exact", "bootstrap")

RowScores = dict[str, float]  # question id -> score in [0, 1]


@dataclass(frozen=True)
class Promotion:
    """A stage's promotion rule by name, with settings of its own (the `search.<rule>` keys) when they are not
    the run's: the benches and tests compare settings side by side; a run's stages leave them empty."""

    rule: str = "score_above"
    settings: tuple[tuple[str, object], ...] = ()  # (setting, value) pairs, e.g. (("level", 0.2),)


def check_test(test: object) -> None:
    """ValueError in one line unless `test` names a paired test of search/stats.py."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}, got {test!r}")


def check_share(name: str, value: object) -> None:
    """ValueError in one line unless `value` is a number strictly between 0 and 1."""
    if not (type(value) in (int, float) and 0.0 < value < 1.0):  # type: ignore[operator]
        raise ValueError(f"{name} must be a number between 0 and 1, got {value!r}")


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str  # one line for a person, in the console and the node record


@runtime_checkable
class PromotionRule(Protocol):
    reads_best: bool

    def verdict(self, promotion: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
                floor: str) -> Verdict: ...

    def plan(self, above: str, promotion: Promotion) -> str: ...


def shared(child: RowScores, other: RowScores | None) -> tuple[list[float], list[float]]:
    """The two sides' scores on the questions both answered, in the same order."""
    other = other or {}
    ids = sorted(set(child) & set(other))
    return [child[i] for i in ids], [other[i] for i in ids]


class Compared:
    """A rule that compares the child with one other node, its parent or (`reads_best`) the best node, on the
    rows both answered (`compare`, given each side's scores on them); without such rows, the floor alone."""

    reads_best = False

    def compare(self, promotion: Promotion, mine: list[float], theirs: list[float]) -> Verdict:
        raise NotImplementedError

    def verdict(self, promotion: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
                floor: str) -> Verdict:
        other, who = (best, "best node") if self.reads_best else (parent, "parent")
        mine, theirs = shared(child, other)
        if not mine:
            why = f"no {who} scores" if other is None else f"no rows shared with the {who}"
            return Verdict(True, f"{floor}; {why}, so the floor alone")
        return self.compare(promotion, mine, theirs)
