"""Racing (search/racing.py): the looks, the spending, the race's verdicts and the error it controls."""

from __future__ import annotations

import random

import pytest

from archive.records import Node
from archive.store import ScoreRule, run_score
from search.racing import ALPHA, Racing, Target, looks, race, reachable, spent, target_of, upper_bound


def test_looks_run_chunk_by_chunk_from_the_rows_already_seen_to_all_of_them():
    assert looks(10, 100, 20) == [30, 50, 70, 90, 100]
    assert looks(0, 100, 10) == [10 * k for k in range(1, 11)]
    assert looks(0, 5, 10) == [5] and looks(10, 10, 10) == [10]


def test_the_error_is_spent_over_the_looks_and_all_of_it_at_the_end():
    shares = [k / 9 for k in range(10)]
    levels = [spent(ALPHA, t) for t in shares]
    assert levels[0] == 0.0 and levels == sorted(levels) and levels[-1] == pytest.approx(ALPHA)
    assert levels[1] < ALPHA / 1000  # O'Brien-Fleming-like: the first look of nine needs a very large gap


def test_the_upper_bound_is_wilson_s_and_a_child_s_reach_stays_within_its_rows():
    assert upper_bound([1.0] * 10, 0.975) == 1.0 and 0.0 < upper_bound([0.0] * 10, 0.975) < 0.35
    assert reachable([0.0] * 80, 100, 0.05) <= 0.2  # 20 rows left: at most 20 more right answers
    assert reachable([1.0] * 100, 100, 0.05) == 1.0


def rows_of(answers: list[float], asked: list[int]):
    def evaluate(upto):
        asked.append(upto["d"])
        return {"d": answers[:upto["d"]]}
    return evaluate


def test_a_child_far_below_its_target_is_raced_out_early_and_keeps_every_row_it_paid_for():
    asked: list[int] = []
    verdict = race(Racing(10, 0.05), Target(0.7, "the best node 3's score 0.700"), {"d": (10, 100)},
                   rows_of([0.0, 1.0] * 50, asked))
    assert verdict.raced_out and verdict.rows == asked[-1] < 100 and verdict.total == 100
    assert asked == list(range(20, asked[-1] + 1, 10))  # chunk by chunk, none skipped, none beyond the stop
    assert verdict.line.startswith(f"raced out after {verdict.rows} of 100 rows: 0.500 so far")
    assert verdict.line.endswith("below the best node 3's score 0.700")


def test_a_child_that_can_still_reach_its_target_runs_every_row():
    asked: list[int] = []
    verdict = race(Racing(10, 0.05), Target(0.5, "the best"), {"d": (0, 100)}, rows_of([1.0] * 100, asked))
    assert not verdict.raced_out and asked[-1] == 100 and verdict.rows == 100


def test_a_split_without_row_scores_runs_to_the_end_unjudged():
    seen: list[int] = []

    def evaluate(upto):
        seen.append(upto["d"])
        return {"d": None}

    assert not race(Racing(10, 0.05), Target(0.9, "x"), {"d": (0, 50)}, evaluate).raced_out and seen[-1] == 50


def test_the_target_is_the_lowest_bar_and_there_is_none_without_a_best():
    best, parent = Target(0.6, "best"), Target(0.4, "parent")
    assert target_of(best, parent) is parent and target_of(best, Target(0.7, "x")) is best
    assert target_of(best, None) is best and target_of(None, parent) is None


@pytest.mark.parametrize("racing", [Racing(0, 0.05), Racing(10, 0.0), Racing(10, 1e-300), Racing(10, 0.5),
                                    Racing(True, 0.05)])  # type: ignore[arg-type]
def test_settings_that_cannot_race_are_refused_in_one_line(racing):
    with pytest.raises(ValueError, match="racing (chunk|alpha) must be") as e:
        racing.check()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("chunk", "alpha", "total"), [(10, ALPHA, 185), (10, ALPHA, 1000), (1, ALPHA, 100),
                                                      (2, 1e-4, 100), (10, 1e-6, 100), (1, ALPHA, 5000)])
def test_early_looks_that_spend_next_to_nothing_are_passed_over_not_a_crash(chunk, alpha, total):
    # With many looks or a small alpha the first looks' levels round to 0 (a normal quantile of 1.0 has no value):
    # they cannot race a child out, and a later look still does.
    verdict = race(Racing(chunk, alpha), Target(0.99, "the best"), {"d": (0, total)}, lambda r: {"d": [0.5] * r["d"]})
    assert verdict.raced_out and verdict.rows < total


def test_a_child_whose_full_evaluation_would_beat_its_target_is_rarely_raced_out():
    """The error racing controls, simulated at the worst case (true skill at the target): raced out although
    all its rows would have ended above the target, at most racing_alpha (in fact far less)."""
    rng, wrong, out = random.Random(7), 0, 0
    for _ in range(3000):
        answers = [float(rng.random() < 0.5) for _ in range(100)]
        verdict = race(Racing(10, 0.05), Target(0.5, "t"), {"d": (0, 100)}, rows_of(answers, []))
        out += verdict.raced_out
        wrong += verdict.raced_out and sum(answers) / 100 > 0.5
    assert wrong / 3000 <= 0.05 and out > 100  # it does race children out, and rarely wrongly


def test_a_raced_out_node_is_a_parent_on_the_mean_of_its_rows_and_never_the_best():
    node = Node("3", "initial", 3, scores={"d": {"train": 0.9, "val": 0.8}}, samples={"d": {"train": 10, "val": 20}},
                full_eval={"d": False}, raced_out="raced out after 20 of 100 rows: ...")
    assert run_score(node, {"d": ("val", 100)}, ScoreRule()) == 0.8  # unscaled, not 0.9 x 10/100
    assert node.valid_parent and not node.can_be_best
    assert "(raced out after 20 of 100 rows)" in node.scores_text()
    node.raced_out = None
    assert run_score(node, {"d": ("val", 100)}, ScoreRule()) == pytest.approx(0.09) and node.can_be_best
