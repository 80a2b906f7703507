"""Whether a screening stage lets a child go on to the next, costlier evaluation.

The HyperAgents paper promotes a child whose screening score is above 0; on 10 rows that
promotes by luck as often as by merit. The other rules compare the child with its parent, or
with the best node so far, on the rows both answered (the same questions, so the comparison is
paired and the rows' own difficulty cancels out):

- `score_above` (default): the stage's floor alone, the paper's rule;
- `not_worse_than_parent`: and no significant evidence, by a one-sided paired test, that the
  child is worse than its parent;
- `sica`: and the child's mean at least the lower bound of the best node's confidence
  interval: within noise of the best so far, not merely above zero.

Every rule first requires the floor: a child scoring 0 on screening is broken whatever its
parent did. Pure: the caller reads the reports (`row_scores`) and records the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from archive.stats import interval, paired_p
from search.parent_selection import TIE_TOLERANCE, highest

if TYPE_CHECKING:
    from services.config import LoopConfig

TESTS = ("exact", "bootstrap")

RowScores = dict[str, float]  # question id -> score in [0, 1]


@dataclass(frozen=True)
class Promotion:
    rule: str = "score_above"
    level: float = 0.05  # significance of not_worse_than_parent's one-sided test
    test: str = "exact"  # "exact" | "bootstrap": the paired test of not_worse_than_parent
    confidence: float = 0.95  # SICA's interval on the best node's score


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str  # one line for a person, in the console and the node record


def check(rule: Promotion) -> None:
    """Raise ValueError with a one-line message when `rule` cannot be applied."""
    if rule.rule not in RULES:
        raise ValueError(f"promotion rule must be one of {', '.join(RULES)}, got {rule.rule!r}")
    if rule.test not in TESTS:
        raise ValueError(f"promotion test must be one of {', '.join(TESTS)}, got {rule.test!r}")
    for name, value in (("level", rule.level), ("confidence", rule.confidence)):
        if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
            raise ValueError(f"promotion {name} must be between 0 and 1, got {value!r}")


def _shared(child: RowScores, other: RowScores | None) -> tuple[list[float], list[float]]:
    """The two sides' scores on the questions both answered, in the same order."""
    other = other or {}
    ids = sorted(set(child) & set(other))
    return [child[i] for i in ids], [other[i] for i in ids]


def _floor_alone(rule: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
                 floor: str) -> Verdict:
    return Verdict(True, floor)


def _not_worse(rule: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
               floor: str) -> Verdict:
    mine, theirs = _shared(child, parent)
    if not mine:
        why = "no parent scores" if parent is None else "no rows shared with the parent"
        return Verdict(True, f"{floor}; {why}, so the floor alone")
    p = paired_p(mine, theirs, "less", rule.test)
    worse = p < rule.level
    return Verdict(not worse, f"{'worse' if worse else 'not worse'} than parent: {sum(mine) / len(mine):.2f} vs "
                              f"{sum(theirs) / len(theirs):.2f} on {len(mine)} shared rows, "
                              f"p={p:.2g} {'<' if worse else '>='} {rule.level:g}")


def _sica(rule: Promotion, child: RowScores, parent: RowScores | None, best: RowScores | None,
          floor: str) -> Verdict:
    mine, theirs = _shared(child, best)
    if not mine:
        why = "no best node scores" if best is None else "no rows shared with the best node"
        return Verdict(True, f"{floor}; {why}, so the floor alone")
    band = interval(theirs, rule.confidence)
    mean = sum(mine) / len(mine)
    ok = mean >= band.low
    return Verdict(ok, f"sica: {mean:.2f} {'>=' if ok else '<'} {band.low:.2f}, the low end of the best node's "
                       f"{rule.confidence:.0%} interval {band.mean:.2f} [{band.low:.2f}, {band.high:.2f}] "
                       f"on {len(mine)} shared rows")


# A rule's verdict on a child that passed the floor: (rule, child, parent, best, the floor's line).
Rule = Callable[[Promotion, RowScores, "RowScores | None", "RowScores | None", str], Verdict]
# By the names the config accepts (services.config.PROMOTION_RULES; tests/test_layers.py checks both agree).
RULES: dict[str, Rule] = {"score_above": _floor_alone, "not_worse_than_parent": _not_worse, "sica": _sica}


def decide(rule: Promotion, above: float, child: RowScores, parent: RowScores | None = None,
           best: RowScores | None = None) -> Verdict:
    """The stage's verdict on a child from its per-row scores, `parent`'s and `best`'s (each
    None when unknown). The floor first: the child's mean over its rows must be > `above`."""
    check(rule)
    if not child:
        return Verdict(False, "no row scores for the child")
    score = sum(child.values()) / len(child)
    if not score > above:
        return Verdict(False, f"score {score:.3f} <= {above:g}")
    return RULES[rule.rule](rule, child, parent, best, f"score {score:.3f} > {above:g}")


def _is_share(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def _from_passed(report: dict, score_key: str) -> RowScores | None:
    """Older reports: 1.0 for a passed question, 0.0 for a failed one, but only when that is the
    report's score (proof reports pass only full marks, so their points score is not)."""
    passed, failed = report.get("question_ids_passed"), report.get("question_ids_failed")
    score = report.get(score_key)
    if not (isinstance(passed, list) and isinstance(failed, list) and passed + failed
            and all(isinstance(i, str) for i in passed + failed)):
        return None
    if len(set(passed + failed)) != len(passed) + len(failed):
        return None
    if not (isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score)
            and abs(len(passed) / (len(passed) + len(failed)) - score) <= 1e-9):
        return None
    return {**{i: 1.0 for i in passed}, **{i: 0.0 for i in failed}}


def row_scores(report: object, score_key: str) -> RowScores | None:
    """The per-row scores of an evaluation report, or None when it has none that can be trusted.

    The report was written from an agent's predictions, so it is checked rather than believed:
    `row_scores` must map question ids to numbers in [0, 1]; a report without them (written
    before they existed) is rebuilt from its passed and failed ids when those reproduce the score.
    """
    if not isinstance(report, dict):
        return None
    if "row_scores" not in report:
        return _from_passed(report, score_key)
    given = report["row_scores"]
    if not (isinstance(given, dict) and given
            and all(isinstance(k, str) and _is_share(v) for k, v in given.items())):
        return None
    return {k: float(v) for k, v in given.items()}


# -- which node is the run's best ----------------------------------------------------------
@dataclass(frozen=True)
class BestChoice:
    """How a run names its best node.

    `highest` (the paper's): the highest selection score; among equals (within `tolerance`:
    archive.selection.highest) the latest node, or with `ties` "earliest" the earliest (the
    reference's `max` over the archive in order, tolerance 0). Every rule takes a score as higher
    only when it is more than `tolerance` higher. Over many
    children the highest of noisy scores is often a lucky one (the winner's curse), so
    `paired` walks the nodes in generation order and lets a node replace the best so far only
    when it scores higher and a one-sided paired test on the rows both were evaluated on finds
    it better at `level`. Two nodes without shared rows compare by score alone.

    `heldout` guards against a task agent that learns its grader (models.heldout_grader,
    archive/heldout.py): in generation order, a node replaces the best so far only when it scores
    higher and its held-out grade is known and not below the best's (a best whose held-out grading
    failed is passed by score alone). Along the chain of bests the held-out grade never falls, so
    small falls cannot add up; the price is that a true gain the held-out grader's noise hides waits
    for a node that shows it.
    """

    rule: str = "highest"
    level: float = 0.05
    test: str = "exact"
    ties: str = "latest"
    tolerance: float = TIE_TOLERANCE  # loop.tie_tolerance: scores within it are equal

    @classmethod
    def of(cls, loop: LoopConfig | dict) -> BestChoice:
        """From a loop config (services.config.LoopConfig) or its dict in run.json (checked)."""
        get = loop.get if isinstance(loop, dict) else lambda name, default: getattr(loop, name, default)
        choice = cls(get("best_choice", "highest"), get("best_level", 0.05), get("promotion_test", "exact"),
                     get("ties", "latest"), get("tie_tolerance", TIE_TOLERANCE))
        if choice.rule not in BEST_RULES or choice.test not in TESTS or choice.ties not in ("latest", "earliest") \
                or not (isinstance(choice.level, (int, float)) and 0.0 < choice.level < 1.0) \
                or not (type(choice.tolerance) in (int, float) and 0.0 <= choice.tolerance < 1.0):
            raise ValueError(f"best choice must be one of {', '.join(BEST_RULES)} with a level between 0 and 1, "
                             f"a test among {', '.join(TESTS)}, ties latest or earliest and a tie tolerance from 0 "
                             f"to below 1, got {choice}")
        return choice


def replaces(choice: BestChoice, score: float, incumbent_score: float, rows: RowScores,
             incumbent_rows: RowScores) -> Verdict:
    """Whether a node (its mean `score`, per-row `rows`) takes the best node's place under `choice`."""
    if not score > incumbent_score + choice.tolerance:
        return Verdict(False, f"{score:.3f} <= {incumbent_score:.3f}")
    mine, theirs = _shared(rows, incumbent_rows)
    if choice.rule == "highest" or not mine:
        return Verdict(True, f"{score:.3f} > {incumbent_score:.3f}" + ("" if choice.rule == "highest" else
                                                                        ", no shared rows to pair"))
    p = paired_p(mine, theirs, "greater", choice.test)
    better = p < choice.level
    return Verdict(better, f"{sum(mine) / len(mine):.2f} vs {sum(theirs) / len(theirs):.2f} on {len(mine)} shared "
                           f"rows, p={p:.2g} {'<' if better else '>='} {choice.level:g}")


class Ranked(Protocol):
    """What choose_best reads of a node besides its scores (archive.records.Node has both)."""

    @property
    def node_id(self) -> str: ...

    @property
    def generation(self) -> int: ...


_Node = TypeVar("_Node", bound=Ranked)


def choose_best(nodes: Iterable[_Node], score: Callable[[_Node], float | None], rows: Callable[[_Node], RowScores],
                choice: BestChoice, heldout: Callable[[_Node], float | None] | None = None) -> _Node | None:
    """The best of `nodes` (each with .node_id and .generation) under `choice`, or None.

    `score(node)`: its selection score, None when it has none (left out); `rows(node)`: its
    per-row scores on the selection split, asked only by the paired rule; `heldout(node)`: its
    held-out grade (None: not graded), asked by the heldout rule of the best so far and of each node
    that scores higher, and only of those (the loop grades what it asks)."""
    scored = [(s, n) for n in nodes if (s := score(n)) is not None]
    return BEST_RULES[choice.rule](scored, rows, choice, heldout or (lambda n: None)) if scored else None


GradeOf = Callable[[_Node], "float | None"]  # a node's held-out grade (None: none)


def _highest(scored: list[tuple[float, _Node]], rows: Callable[[_Node], RowScores], choice: BestChoice,
             heldout: GradeOf) -> _Node:
    return highest(scored, lambda t: t[0], lambda t: t[1].generation, choice.ties, choice.tolerance)[1]


def _heldout(scored: list[tuple[float, _Node]], rows: Callable[[_Node], RowScores], choice: BestChoice,
             heldout: GradeOf) -> _Node:
    scored.sort(key=lambda t: (t[1].generation, t[1].node_id))
    best_score, best = scored[0]
    for s, node in scored[1:]:
        if s > best_score + choice.tolerance:
            mine, theirs = heldout(node), heldout(best)
            if mine is not None and (theirs is None or mine >= theirs):
                best_score, best = s, node
    return best


def _paired(scored: list[tuple[float, _Node]], rows: Callable[[_Node], RowScores], choice: BestChoice,
            heldout: GradeOf) -> _Node:
    scored.sort(key=lambda t: (t[1].generation, t[1].node_id))
    best_score, best = scored[0]
    best_rows = rows(best)
    for s, node in scored[1:]:
        if s > best_score + choice.tolerance:  # the test is paid only for a node that scores higher
            mine = rows(node)
            if replaces(choice, s, best_score, mine, best_rows).promote:
                best_score, best, best_rows = s, node, mine
    return best


# How a best node is chosen among the scored (score, node) pairs, by the names the config accepts
# (services.config.BEST_CHOICES; tests/test_layers.py checks both agree).
BEST_RULES: dict[str, Callable] = {"highest": _highest, "paired": _paired, "heldout": _heldout}
