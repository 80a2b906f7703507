"""search/stats.py against values worked out by hand, and its sampled answers against exact ones."""

from __future__ import annotations

import math
import random
import time

import pytest

from search import stats
from search.stats import Estimate, bootstrap_band, bootstrap_mean, interval, paired_p, permutation_p, wilson


def test_wilson_of_seven_in_ten():
    low, high = wilson(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)


def test_wilson_stays_inside_zero_and_one_at_the_ends():
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.2 < high < 0.35
    low, high = wilson(10, 10)
    assert high == 1.0 and 0.65 < low < 0.8


def test_wilson_widens_with_the_level():
    assert wilson(7, 10, 0.99)[0] < wilson(7, 10, 0.95)[0] < wilson(7, 10, 0.8)[0]


@pytest.mark.parametrize("successes, n, level", [(1, 0, 0.95), (11, 10, 0.95), (-1, 10, 0.95), (5, 10, 1.0),
                                                 (5, 10, 0.0)])
def test_wilson_refuses_what_is_not_a_proportion(successes, n, level):
    with pytest.raises(ValueError):
        wilson(successes, n, level)


def test_an_interval_of_zeros_and_ones_is_wilson():
    est = interval([1] * 7 + [0] * 3)
    assert (est.low, est.high) == wilson(7, 10) and est.mean == pytest.approx(0.7) and est.n == 10


def test_an_interval_of_partial_credit_is_the_bootstrap():
    values = [0, 1 / 7, 6 / 7, 1, 1, 0, 6 / 7, 1 / 7]
    est = interval(values, seed=3)
    assert (est.low, est.high) == bootstrap_mean(values, seed=3)
    assert est.low < est.mean < est.high


def test_an_interval_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        interval([])


def test_an_estimate_reads_as_a_person_writes_it():
    est = Estimate(0.62, 0.52, 0.71, 100)
    assert str(est) == "0.620 [0.520, 0.710] n=100"
    assert Estimate(0.5, 0.123456, 0.876543, 9).to_list() == [0.1235, 0.8765]


def test_the_bootstrap_replays_for_a_seed_and_agrees_with_wilson_on_many_rows():
    rng = random.Random(5)
    values = [float(rng.random() < 0.6) for _ in range(200)]
    assert bootstrap_mean(values, seed=1) == bootstrap_mean(values, seed=1)
    continuous = [rng.random() for _ in range(50)]
    assert bootstrap_mean(continuous, seed=1) != bootstrap_mean(continuous, seed=2)
    exact = wilson(int(sum(values)), len(values))
    assert bootstrap_mean(values, seed=1) == pytest.approx(exact, abs=0.01)


def test_two_hundred_rows_and_two_thousand_resamples_are_quick():
    rng = random.Random(0)
    x, y = [rng.random() for _ in range(200)], [rng.random() for _ in range(200)]
    started = time.perf_counter()
    interval(x)
    paired_p(x, y)
    paired_p(x, y, method="bootstrap")
    # Each is well under 0.1 s alone; the bound leaves room for a loaded machine.
    assert time.perf_counter() - started < 1.0


def _pairs(b: int, c: int, same: int = 0) -> tuple[list[int], list[int]]:
    """Child and parent 0/1 rows: b rows only the parent got right, c only the child, `same` both."""
    return [0] * b + [1] * c + [1] * same, [1] * b + [0] * c + [1] * same


def test_the_sign_test_when_the_parent_alone_was_right_five_times():
    child, parent = _pairs(5, 0, same=5)
    assert paired_p(child, parent, "less") == 1 / 32
    assert paired_p(child, parent, "two-sided") == 2 / 32
    assert paired_p(child, parent, "greater") == 1.0


def test_the_sign_test_on_three_against_one():
    child, parent = _pairs(3, 1)
    assert paired_p(child, parent, "less") == 5 / 16
    assert paired_p(child, parent, "greater") == 15 / 16
    assert paired_p(child, parent, "two-sided") == 10 / 16


def test_a_two_sided_p_is_capped_at_one():
    child, parent = _pairs(2, 2)
    assert paired_p(child, parent, "two-sided") == 1.0


def test_no_difference_at_all_is_p_one():
    assert paired_p([1, 0, 1], [1, 0, 1]) == 1.0
    assert paired_p([0.5, 0.25], [0.5, 0.25], method="bootstrap") == 1.0


def test_the_sign_flip_test_on_one_two_three():
    # Of the 8 sign patterns of (1, 2, 3) only all-plus reaches a sum of 6.
    assert paired_p([1, 2, 3], [0, 0, 0], "greater") == 1 / 8
    assert paired_p([1, 2, 3], [0, 0, 0], "less") == 1.0
    assert paired_p([1, 2, 3], [0, 0, 0], "two-sided") == 2 / 8


def test_the_sign_flip_test_on_a_half_down_and_a_quarter_up():
    # d = (-0.5, +0.25), sum -0.25; flipped sums 0.75, 0.25, -0.25, -0.75.
    x, y = [0.25, 0.5, 0.3], [0.75, 0.25, 0.3]
    assert paired_p(x, y, "less") == 2 / 4
    assert paired_p(x, y, "greater") == 3 / 4
    assert paired_p(x, y, "two-sided") == 1.0


def test_ties_in_the_sign_flips_survive_rounding():
    # d = (0.1, 0.2, -0.3): sums 0.6, 0, 0.2, -0.4, 0.4, -0.2, 0, -0.6, so 5 of 8 are >= the observed 0.
    # In floating point the observed sum is +5.6e-17 and the all-flipped one -5.6e-17: a tie all the same.
    x, y = [0.1, 0.2, 0.0], [0.0, 0.0, 0.3]
    assert paired_p(x, y, "greater") == 5 / 8


def test_many_half_point_differences_sample_the_sign_test():
    child, parent = [0.0] * 20 + [0.5] * 8, [0.5] * 20 + [0.0] * 8
    exact = sum(math.comb(28, k) for k in range(9)) / 2 ** 28
    p = paired_p(child, parent, "less", resamples=20000)
    assert p == pytest.approx(exact, abs=0.005)
    assert (p * 20001 - 1) == pytest.approx(round(p * 20001 - 1))  # (1 + hits) / (1 + resamples)


def test_sampled_sign_flips_agree_with_the_enumerated_ones(monkeypatch):
    rng = random.Random(9)
    x = [rng.random() for _ in range(12)]
    y = [v + rng.gauss(0.1, 0.2) for v in x]
    exact = paired_p(x, y, "less")
    monkeypatch.setattr(stats, "MAX_ENUMERATED_FLIPS", 0)
    assert paired_p(x, y, "less", resamples=20000) == pytest.approx(exact, abs=0.01)


def test_the_paired_bootstrap_replays_and_agrees_with_the_sign_flips():
    rng = random.Random(3)
    x = [rng.random() * 0.8 for _ in range(80)]
    y = [v + 0.05 + rng.gauss(0, 0.2) for v in x]
    boot = paired_p(x, y, "less", "bootstrap", seed=4)
    assert boot == paired_p(x, y, "less", "bootstrap", seed=4)
    assert boot == pytest.approx(paired_p(x, y, "less"), abs=0.04)
    assert 0.05 < boot < 0.3
    assert paired_p(x, y, "two-sided", "bootstrap") == pytest.approx(paired_p(x, y, "two-sided"), abs=0.04)
    assert paired_p(x, y, "greater", "bootstrap") > 0.8


@pytest.mark.parametrize("kwargs", [{"alternative": "smaller"}, {"method": "t"}])
def test_paired_p_refuses_unknown_options(kwargs):
    with pytest.raises(ValueError):
        paired_p([1, 0], [0, 1], **kwargs)


def test_paired_p_needs_pairs():
    with pytest.raises(ValueError):
        paired_p([1, 0, 1], [1, 0])


def test_permutation_of_one_two_three_against_four_five_six():
    # One of the C(6, 3) = 20 ways to pick three of the six gives a mean gap as low as -3.
    assert permutation_p([1, 2, 3], [4, 5, 6], "less") == 1 / 20
    assert permutation_p([1, 2, 3], [4, 5, 6], "greater") == 1.0
    assert permutation_p([1, 2, 3], [4, 5, 6]) == 2 / 20


def test_permutation_groups_may_differ_in_size():
    # Picks of one from {1, 2, 3, 10}: only 10 makes a's mean 10 - 2 = 8 above the others.
    assert permutation_p([10], [1, 2, 3], "greater") == 1 / 4


def test_sampled_permutations_agree_with_the_enumerated_ones(monkeypatch):
    rng = random.Random(2)
    a = [rng.gauss(0.5, 0.1) for _ in range(7)]
    b = [rng.gauss(0.6, 0.1) for _ in range(8)]
    exact = permutation_p(a, b, "less")
    monkeypatch.setattr(stats, "MAX_ENUMERATED_SPLITS", 0)
    sampled = permutation_p(a, b, "less", seed=1)
    assert sampled == pytest.approx(exact, abs=0.01)
    assert sampled == permutation_p(a, b, "less", seed=1)


def test_many_runs_apart_give_the_smallest_sampled_p():
    assert permutation_p([0.0] * 12, [1.0] * 12, resamples=999) == 1 / 1000


def test_permutation_needs_both_groups():
    with pytest.raises(ValueError):
        permutation_p([], [1, 2])


def test_a_band_of_one_run_is_the_run():
    band = bootstrap_band([[0.1, 0.3, 0.3, 0.6]])
    assert [(e.mean, e.low, e.high, e.n) for e in band] == [(v, v, v, 1) for v in (0.1, 0.3, 0.3, 0.6)]


def _runs(count: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    curves = []
    for _ in range(count):
        best, curve = 0.0, []
        for _ in range(10):
            best = max(best, rng.random() * 0.8)
            curve.append(best)
        curves.append(curve)
    return curves


def test_a_band_holds_the_mean_and_narrows_with_more_runs():
    few, many = bootstrap_band(_runs(4, 1)), bootstrap_band(_runs(40, 1))
    for band in (few, many):
        assert all(e.low <= e.mean <= e.high for e in band)
    width = [sum(e.high - e.low for e in band) / len(band) for band in (few, many)]
    assert width[1] < width[0] / 2
    assert few == bootstrap_band(_runs(4, 1))


def test_a_band_needs_curves_of_one_length():
    with pytest.raises(ValueError):
        bootstrap_band([[0.1, 0.2], [0.3]])
    with pytest.raises(ValueError):
        bootstrap_band([])
