"""archive/promotion.py and the rules of search/promotion/ and search/best_choice/: each rule's verdict on
crafted children, its fallbacks, and row scores read from reports an agent's predictions produced."""

from __future__ import annotations

import pytest

from archive.promotion import BestChoice, Promotion, best_rule, check, choose_best, decide, row_scores
from search.best_choice.paired import Settings as PairedSettings
from search.best_choice.paired import replaces
from search.stats import wilson
from services.strategy_names import strategy_names

RULES = strategy_names("promotion")


def rows(*scores: float, start: int = 0) -> dict[str, float]:
    return {f"q{start + i}": float(s) for i, s in enumerate(scores)}


NOT_WORSE = Promotion("not_worse_than_parent")
SICA = Promotion("sica")


def test_score_above_is_the_floor_alone():
    verdict = decide(Promotion(), 0, rows(1, 0, 0, 0, 0))
    assert verdict.promote and verdict.reason == "score 0.200 > 0"
    verdict = decide(Promotion(), 0, rows(0, 0, 0))
    assert not verdict.promote and verdict.reason == "score 0.000 <= 0"
    assert not decide(Promotion(), 0.5, rows(1, 0)).promote


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_stops_a_child_below_the_floor(rule):
    # The parent and the best node scored 0 too: not worse than them, and broken all the same.
    zeros = rows(*[0] * 10)
    verdict = decide(Promotion(rule), 0, zeros, parent=zeros, best=zeros)
    assert not verdict.promote and "<= 0" in verdict.reason


def test_no_row_scores_for_the_child_is_no_promotion():
    assert not decide(NOT_WORSE, 0, {}).promote


def test_a_child_worse_on_five_rows_and_better_on_none_is_stopped():
    # Parent right and child wrong on 5 rows, both right on 5: sign test p = 1/32.
    child, parent = rows(*[0] * 5, *[1] * 5), rows(*[1] * 10)
    verdict = decide(NOT_WORSE, 0, child, parent)
    assert not verdict.promote
    assert verdict.reason == "worse than parent: 0.50 vs 1.00 on 10 shared rows, p=0.031 < 0.05"


def test_three_against_one_is_not_evidence_at_five_percent():
    # 3 rows lost, 1 won: p = 5/16, which a looser level of 0.4 counts as worse.
    child, parent = rows(0, 0, 0, 1, 1, 1), rows(1, 1, 1, 0, 1, 1)
    verdict = decide(NOT_WORSE, 0, child, parent)
    assert verdict.promote
    assert verdict.reason == "not worse than parent: 0.50 vs 0.83 on 6 shared rows, p=0.31 >= 0.05"
    assert not decide(Promotion("not_worse_than_parent", (("level", 0.4),)), 0, child, parent).promote


def test_only_the_rows_both_answered_are_compared():
    # The parent's other 90 rows (all right) must not count against a child that ran 10.
    child = rows(*[1] * 5, *[0] * 5)
    parent = {**rows(*[1] * 5, *[0] * 5), **rows(*[1] * 90, start=10)}
    verdict = decide(NOT_WORSE, 0, child, parent)
    assert verdict.promote and "on 10 shared rows" in verdict.reason and "p=1 " in verdict.reason


def test_not_worse_with_the_bootstrap_test():
    child, parent = rows(*[0] * 8, *[1] * 12), rows(*[1] * 20)
    verdict = decide(Promotion("not_worse_than_parent", (("test", "bootstrap"),)), 0, child, parent)
    assert not verdict.promote and "worse than parent" in verdict.reason


def test_partial_credit_uses_the_sign_flips():
    # d = (-6/7, -6/7, -5/7, -1/7, 0...): every difference against the child, p = 1/16.
    child, parent = rows(0, 0, 1 / 7, 0, 1), rows(6 / 7, 6 / 7, 6 / 7, 1 / 7, 1)
    assert decide(NOT_WORSE, 0, child, parent).reason.endswith("p=0.062 >= 0.05")
    assert not decide(Promotion("not_worse_than_parent", (("level", 0.1),)), 0, child, parent).promote


def test_without_a_parent_the_floor_decides_and_says_so():
    verdict = decide(NOT_WORSE, 0, rows(1, 0))
    assert verdict.promote and verdict.reason == "score 0.500 > 0; no parent scores, so the floor alone"
    verdict = decide(NOT_WORSE, 0, rows(1, 0), parent=rows(1, 1, start=5))
    assert verdict.promote and "no rows shared with the parent" in verdict.reason
    assert not decide(NOT_WORSE, 0, rows(0, 0)).promote


def test_sica_promotes_within_the_best_nodes_interval():
    # The best node got 7 of 10: Wilson's 95% low end is 0.3968.
    best = rows(*[1] * 7, *[0] * 3)
    assert wilson(7, 10)[0] == pytest.approx(0.3968, abs=1e-4)
    verdict = decide(SICA, 0, rows(*[1] * 4, *[0] * 6), best=best)
    assert verdict.promote
    assert verdict.reason == ("sica: 0.40 >= 0.40, the low end of the best node's 95% interval 0.70 [0.40, 0.89] "
                              "on 10 shared rows")
    verdict = decide(SICA, 0, rows(*[1] * 3, *[0] * 7), best=best)
    assert not verdict.promote and verdict.reason.startswith("sica: 0.30 < 0.40")


def test_sica_compares_on_the_shared_rows_at_its_confidence():
    best = {**rows(*[1] * 7, *[0] * 3), **rows(*[0] * 50, start=10)}
    child = rows(*[1] * 3, *[0] * 7)
    assert not decide(SICA, 0, child, best=best).promote
    assert decide(Promotion("sica", (("confidence", 0.999),)), 0, child, best=best).promote


def test_without_a_best_node_sica_is_the_floor():
    verdict = decide(SICA, 0, rows(1, 0))
    assert verdict.promote and "no best node scores" in verdict.reason
    verdict = decide(SICA, 0, rows(1, 0), best=rows(1, start=9))
    assert verdict.promote and "no rows shared with the best node" in verdict.reason


NWP = "not_worse_than_parent"


@pytest.mark.parametrize("rule", [Promotion("luck"), Promotion(NWP, (("test", "t"),)), Promotion(NWP, (("level", 0),)),
                                  Promotion(NWP, (("level", 1.5),)), Promotion("sica", (("confidence", 1.0),)),
                                  Promotion(NWP, (("level", "0.05"),)), Promotion(NWP, (("confidence", 0.9),)),
                                  Promotion("score_above", (("level", 0.1),))])
def test_check_refuses_what_cannot_be_applied(rule):
    with pytest.raises(ValueError) as raised:
        check(rule)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError):
        decide(rule, 0, rows(1))


def test_check_accepts_every_rule_and_test():
    for rule in RULES:
        check(Promotion(rule))
    for test in ("exact", "bootstrap"):
        assert check(Promotion(NWP, (("level", 0.2), ("test", test)))).settings.test == test  # type: ignore[attr-defined]
    assert check(Promotion("sica", (("confidence", 0.9),))).settings.confidence == 0.9  # type: ignore[attr-defined]


def test_row_scores_come_from_the_report():
    report = {"overall_accuracy": 0.5, "row_scores": {"a": 1.0, "b": 0, "c": 3 / 7}}
    assert row_scores(report, "overall_accuracy") == {"a": 1.0, "b": 0.0, "c": 3 / 7}


def test_an_older_report_is_rebuilt_from_its_passed_and_failed_ids():
    report = {"overall_accuracy": 2 / 3, "question_ids_passed": ["a", "b"], "question_ids_failed": ["c"]}
    assert row_scores(report, "overall_accuracy") == {"a": 1.0, "b": 1.0, "c": 0.0}


def test_an_older_report_whose_ids_do_not_make_its_score_has_none():
    # A proof report passes only full marks, so its points score is not the passed share.
    report = {"points_percentage": 0.55, "question_ids_passed": ["a"], "question_ids_failed": ["b", "c"]}
    assert row_scores(report, "points_percentage") is None
    assert row_scores({**report, "points_percentage": None}, "points_percentage") is None
    assert row_scores({"question_ids_passed": ["a"], "question_ids_failed": []}, "missing") is None


@pytest.mark.parametrize("forged", [
    {"a": "1.0"}, {"a": 2.0}, {"a": -0.1}, {"a": float("nan")}, {"a": True}, {1: 1.0}, {}, ["a", "b"], "a", None,
    {"a": [1.0]},
])
def test_forged_row_scores_are_none(forged):
    report = {"overall_accuracy": 1.0, "row_scores": forged, "question_ids_passed": ["a"], "question_ids_failed": []}
    assert row_scores(report, "overall_accuracy") is None


@pytest.mark.parametrize("passed, failed", [(["a", "a"], ["b"]), (["a"], ["a"]), ("ab", []), ([1], []), ([], [])])
def test_forged_passed_and_failed_ids_are_none(passed, failed):
    total = len(passed) + len(failed)
    report = {"overall_accuracy": len(passed) / total if total else 0.0,
              "question_ids_passed": passed, "question_ids_failed": failed}
    assert row_scores(report, "overall_accuracy") is None


def test_a_report_that_is_not_a_dict_has_none():
    assert row_scores(["row_scores"], "overall_accuracy") is None


# -- the best node ------------------------------------------------------------------------
class Pick:
    """A node as choose_best sees it: id, generation, score and per-row scores."""

    def __init__(self, node_id: str, generation: int, score: float, rows: dict[str, float]):
        self.node_id, self.generation, self.score, self.rows = node_id, generation, score, rows


def best_of(picks: list[Pick], choice: BestChoice) -> str:
    return choose_best(picks, lambda p: p.score, lambda p: p.rows, choice).node_id


BASE = {f"q{i}": float(i % 2) for i in range(40)}  # 20 of 40 right
LUCKY = {**BASE, "q0": 1.0, "q2": 1.0}  # two rows more: one-sided sign test p = (1/2)**2
# Right unless i % 5 == 0: against BASE, 16 rows for it (even i, not a multiple of 10) and 4 against (5, 15, 25, 35).
STRONG = {k: 0.0 if int(k[1:]) % 5 == 0 else 1.0 for k in BASE}
STRONG_P = (4845 + 1140 + 190 + 20 + 1) / 2**20  # P(X >= 16), X ~ Binomial(20, 1/2)


def test_a_node_two_rows_better_is_not_evidence_of_being_better():
    verdict = replaces(0.55, 0.5, LUCKY, BASE)
    assert not verdict.promote and "p=0.25 >= 0.05" in verdict.reason and "40 shared rows" in verdict.reason


def test_sixteen_rows_against_four_replace_the_best():
    verdict = replaces(0.8, 0.5, STRONG, BASE)
    assert verdict.promote and f"p={STRONG_P:.2g} < 0.05" in verdict.reason
    assert not replaces(0.8, 0.5, STRONG, BASE, PairedSettings(level=0.005)).promote  # p = 0.0059


def test_the_paper_takes_the_highest_score_and_paired_keeps_the_best_until_a_node_beats_it():
    picks = [Pick("initial", 0, 0.5, BASE), Pick("1", 1, 0.55, LUCKY), Pick("2", 2, 0.525, BASE)]
    assert best_of(picks, BestChoice("highest")) == "1"
    assert best_of(picks, BestChoice("paired")) == "initial"
    # Compared with the best so far (initial), not with the highest seen: 3 beats initial, not 1's luck.
    picks.append(Pick("3", 3, 0.8, STRONG))
    assert best_of(picks, BestChoice("paired")) == "3"


def test_a_lower_score_never_replaces_the_best_and_the_highest_takes_the_latest_of_equals():
    picks = [Pick("initial", 0, 0.9, BASE), Pick("1", 1, 0.5, STRONG), Pick("2", 2, 0.9, BASE)]
    assert best_of(picks, BestChoice("paired")) == "initial"
    assert best_of(picks, BestChoice("highest")) == "2"


def test_nodes_without_shared_rows_compare_by_score():
    picks = [Pick("initial", 0, 0.5, {}), Pick("1", 1, 0.6, LUCKY)]
    assert best_of(picks, BestChoice("paired")) == "1"
    assert "no shared rows" in replaces(0.6, 0.5, LUCKY, {"other": 1.0}).reason


def test_best_choice_from_a_config_is_checked():
    paired = {"best_choice": "paired"}
    assert BestChoice.of(paired, {"paired": {"level": 0.1, "test": "bootstrap"}, "islands": {"islands": 2}}) == \
        BestChoice("paired", settings=(("level", 0.1), ("test", "bootstrap")))
    assert BestChoice.of({}) == BestChoice() and BestChoice.of({}, {"paired": {"level": 0.1}}) == BestChoice()
    for bad in ({"best_choice": "luckiest"}, {"ties": "random"}, {"tie_tolerance": 1.0}):
        with pytest.raises(ValueError, match="best choice must be one of heldout, highest, paired"):
            BestChoice.of(bad)
    for search, why in (({"paired": {"level": 1.5}}, "level must be a number between 0 and 1"),
                        ({"paired": {"level": "0.1"}}, "search.paired.level must be a number"),
                        ({"paired": {"test": "t"}}, "test must be one of exact, bootstrap"),
                        ({"paired": {"luck": 1}}, "paired has no such setting"),
                        ({"paired": [1]}, "search.paired must be a mapping")):
        with pytest.raises(ValueError, match=why):
            best_rule(BestChoice.of(paired, search))


def test_a_paired_best_reads_its_level_from_the_runs_search_settings_as_the_run_saved_them():
    # The same nodes, the same rule: the level the run configured decides, also for a reader of run.json.
    picks = [Pick("initial", 0, 0.5, BASE), Pick("3", 3, 0.8, STRONG)]
    assert best_of(picks, BestChoice.of({"best_choice": "paired"}, {})) == "3"
    assert best_of(picks, BestChoice.of({"best_choice": "paired"}, {"paired": {"level": 0.005}})) == "initial"
    from services.config import Config
    legacy = Config.from_dict({"loop": {"best_choice": "paired", "best_level": 0.005, "promotion_test": "exact"}})
    assert legacy.search["paired"] == {"level": 0.005, "test": "exact"}  # a run.json saved before the move
    assert best_of(picks, BestChoice.of(legacy.loop, legacy.search)) == "initial"
