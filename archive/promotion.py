"""Whether a screening stage lets a child go on (`decide`, by the stage's rule: search/promotion/, one file
a rule, or an installed plug-in's), which node is a run's best (`choose_best`, by `loop.best_choice`:
search/best_choice/) and the per-row scores both read from an evaluation's report (`row_scores`).

Every promotion rule first requires the floor: a child scoring 0 on screening is broken whatever its parent
did. Pure: the caller reads the reports (`row_scores`) and records the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import cast

from search.best_choice import BestChoice, BestChoiceRule, Node
from search.promotion import Promotion, PromotionRule, RowScores, Verdict
from search.registry import best_choice_rule, promotion_rule, with_settings
from services.errors import UserError
from services.strategy_names import strategy_names

__all__ = ["BestChoice", "Promotion", "RowScores", "Verdict", "best_rule", "check", "choose_best", "decide",
           "row_scores"]


def check(rule: Promotion) -> PromotionRule:
    """The rule `rule` names, with its own settings when it has some (else the run's, search.registry's);
    ValueError with a one-line message when it cannot be applied."""
    rules = strategy_names("promotion")
    if rule.rule not in rules:
        raise ValueError(f"promotion rule must be one of {', '.join(rules)}, got {rule.rule!r}")
    if not rule.settings:
        return promotion_rule(rule.rule)
    try:
        made = with_settings("promotion", rule.rule, promotion_rule(rule.rule), dict(rule.settings))
        return cast(PromotionRule, made)
    except UserError as e:
        raise ValueError(f"promotion {e}") from None


def decide(rule: Promotion, above: float, child: RowScores, parent: RowScores | None = None,
           best: RowScores | None = None) -> Verdict:
    """The stage's verdict on a child from its per-row scores, `parent`'s and `best`'s (each
    None when unknown). The floor first: the child's mean over its rows must be > `above`."""
    strategy = check(rule)
    if not child:
        return Verdict(False, "no row scores for the child")
    score = sum(child.values()) / len(child)
    if not score > above:
        return Verdict(False, f"score {score:.3f} <= {above:g}")
    return strategy.verdict(rule, child, parent, best, f"score {score:.3f} > {above:g}")


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


def choose_best(nodes: Iterable[Node], score: Callable[[Node], float | None], rows: Callable[[Node], RowScores],
                choice: BestChoice, heldout: Callable[[Node], float | None] | None = None) -> Node | None:
    """The best of `nodes` (each with .node_id and .generation) under `choice`, or None.

    `score(node)`: its selection score, None when it has none (left out); `rows(node)`: its
    per-row scores on the selection split, asked only by a rule that reads rows (paired); `heldout(node)`:
    its held-out grade (None: not graded), asked by the heldout rule of the best so far and of each node
    that scores higher, and only of those (the loop grades what it asks)."""
    scored = [(s, n) for n in nodes if (s := score(n)) is not None]
    return best_rule(choice).choose(scored, rows, choice, heldout or (lambda n: None)) if scored else None


def best_rule(choice: BestChoice) -> BestChoiceRule:
    """The rule `choice` names, made with its settings when it carries some (a run's, read from its run.json),
    else as this process's run configured it; ValueError in one line for settings the rule refuses."""
    rule = best_choice_rule(choice.rule)
    if not choice.settings:
        return rule
    try:
        return cast(BestChoiceRule, with_settings("best_choice", choice.rule, rule, dict(choice.settings)))
    except UserError as e:
        raise ValueError(f"best choice {e}") from None
