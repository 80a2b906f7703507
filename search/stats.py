"""Intervals and tests for scores measured on few rows, so that noise is not read as progress.

Pure functions over per-row scores (floats in [0, 1] whose mean is a split's score); the
standard library only, and every resampling draws from `random.Random(seed)`, so a result
replays exactly.

- `interval`: a score with its confidence interval (Wilson for 0/1 rows, else a percentile
  bootstrap);
- `paired_p`: is a child worse than its parent on the rows both answered (exact sign test or
  sign-flip permutation, or a paired bootstrap);
- `permutation_p`: do two groups of runs differ;
- `bootstrap_band`: a band around the mean of several runs' curves.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations, compress
from statistics import NormalDist

ALTERNATIVES = ("less", "greater", "two-sided")
PAIRED_METHODS = ("exact", "bootstrap")
MAX_ENUMERATED_FLIPS = 16  # 2**16 sign patterns: enumerated in a few ms
MAX_ENUMERATED_SPLITS = 20000  # relabelings of two groups enumerated before sampling
# Sums of the same terms in another order differ by rounding; a tie must still count as a tie.
_TIE = 1e-9
# Byte -> 1 for half of the 256 values: one random byte a sign flip, at C speed.
_FLIP = bytes(b >> 7 for b in range(256))


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    n: int  # rows (or runs) the mean is over
    level: float = 0.95

    def __str__(self) -> str:
        return f"{self.mean:.3f} {interval_text(self.low, self.high)} n={self.n}"

    def to_list(self) -> list:
        return [round(self.low, 4), round(self.high, 4)]


def interval_text(low: float, high: float) -> str:
    """An interval as every screen of the project writes it (console, report, dashboard): `[0.522, 0.710]`."""
    return f"[{low:.3f}, {high:.3f}]"


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be between 0 and 1, got {level}")


def _check(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion: unlike p ± z·se it stays inside [0, 1] and does not
    collapse to a point at 0/10 or 10/10, the usual outcomes of a 10-row screening."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson needs 0 <= successes <= n and n > 0, got {successes} of {n}")
    _check_level(level)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the order statistics of a sorted list."""
    at = q * (len(ordered) - 1)
    below = math.floor(at)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (at - below)


def _percentiles(draws: list[float], level: float) -> tuple[float, float]:
    _check_level(level)
    draws.sort()
    tail = (1.0 - level) / 2.0
    return _quantile(draws, tail), _quantile(draws, 1.0 - tail)


def _resampled_means(values: list[float], rng: random.Random, resamples: int) -> list[float]:
    n = len(values)
    return [sum(rng.choices(values, k=n)) / n for _ in range(resamples)]


def bootstrap_mean(values: Iterable[float], level: float = 0.95, seed: int = 0,
                   resamples: int = 2000) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: the central `level` share of the means of
    `resamples` samples drawn with replacement."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("bootstrap_mean needs at least one value")
    return _percentiles(_resampled_means(values, random.Random(seed), resamples), level)


def interval(values: Iterable[float], level: float = 0.95, seed: int = 0, resamples: int = 2000) -> Estimate:
    """The mean with its interval: Wilson when every value is exactly 0 or 1 (accuracy rows),
    else the percentile bootstrap (partial credit, such as proof points / 7)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("interval needs at least one value")
    n = len(values)
    if all(v in (0.0, 1.0) for v in values):
        low, high = wilson(int(sum(values)), n, level)
    else:
        low, high = bootstrap_mean(values, level, seed, resamples)
    return Estimate(sum(values) / n, low, high, n, level)


def _tail_share(draws: Iterable[float], observed: float, alternative: str, scale: float) -> int:
    """How many draws are at least as extreme as `observed` in the alternative's direction."""
    tie = _TIE * scale
    if alternative == "less":
        return sum(1 for s in draws if s <= observed + tie)
    if alternative == "greater":
        return sum(1 for s in draws if s >= observed - tie)
    return sum(1 for s in draws if abs(s) >= abs(observed) - tie)


def _sign_test(discordant: int, positive: int, alternative: str) -> float:
    """Exact binomial(discordant, 1/2) tail of the count of positive differences."""
    total = 2 ** discordant
    at_most = sum(math.comb(discordant, k) for k in range(positive + 1)) / total
    at_least = sum(math.comb(discordant, k) for k in range(positive, discordant + 1)) / total
    if alternative == "less":
        return at_most
    if alternative == "greater":
        return at_least
    return min(1.0, 2.0 * min(at_most, at_least))


def _sign_flip(nonzero: list[float], alternative: str, seed: int, resamples: int) -> float:
    """Permutation test of the sum of differences under H0's symmetry: each difference is as
    likely to have had the other sign. Every pattern when few, else `resamples` seeded ones."""
    observed, scale = sum(nonzero), 1.0 + sum(abs(d) for d in nonzero)
    if len(nonzero) <= MAX_ENUMERATED_FLIPS:
        sums = [0.0]
        for d in nonzero:
            sums = [s + d for s in sums] + [s - d for s in sums]
        return _tail_share(sums, observed, alternative, scale) / len(sums)
    rng, sizes = random.Random(seed), [abs(d) for d in nonzero]
    total = sum(sizes)
    # A flipped set F gives sum = total - 2·sum(F) over |d|: the same law as flipping the d's.
    draws = (total - 2.0 * sum(compress(sizes, rng.randbytes(len(sizes)).translate(_FLIP)))
             for _ in range(resamples))
    return (1 + _tail_share(draws, observed, alternative, scale)) / (1 + resamples)


def _paired_bootstrap(d: list[float], alternative: str, seed: int, resamples: int) -> float:
    """Bootstrap of the mean difference with the differences shifted to mean 0 (H0 true)."""
    observed = sum(d) / len(d)
    centred = [v - observed for v in d]
    draws = _resampled_means(centred, random.Random(seed), resamples)
    return (1 + _tail_share(draws, observed, alternative, 1.0)) / (1 + resamples)


def paired_p(x: Iterable[float], y: Iterable[float], alternative: str = "less", method: str = "exact", seed: int = 0,
             resamples: int = 2000) -> float:
    """p-value of a paired test on d = x - y, row by row.

    alternative "less": H1 is mean(x) < mean(y), x worse than y (small p: x is worse);
    "greater": H1 mean(x) > mean(y); "two-sided": they differ.
    method "exact": rows all 0/1 -> exact sign test (McNemar) on the discordant rows; otherwise
    a sign-flip permutation test on the nonzero differences (enumerated up to 16 of them, else
    Monte Carlo with `resamples` seeded flips, p = (1 + hits) / (1 + resamples)).
    method "bootstrap": paired bootstrap of the mean difference under H0.
    No difference at all -> 1.0.
    """
    x, y = [float(v) for v in x], [float(v) for v in y]
    if len(x) != len(y):
        raise ValueError(f"paired_p needs rows in pairs, got {len(x)} and {len(y)}")
    _check(alternative)
    if method not in PAIRED_METHODS:
        raise ValueError(f"method must be one of {', '.join(PAIRED_METHODS)}, got {method!r}")
    d = [a - b for a, b in zip(x, y)]
    nonzero = [v for v in d if v != 0.0]
    if not nonzero:
        return 1.0
    if method == "bootstrap":
        return _paired_bootstrap(d, alternative, seed, resamples)
    if all(v in (0.0, 1.0) for v in x + y):
        return _sign_test(len(nonzero), sum(1 for v in nonzero if v > 0), alternative)
    return _sign_flip(nonzero, alternative, seed, resamples)


def permutation_p(a: Iterable[float], b: Iterable[float], alternative: str = "two-sided", seed: int = 0,
                  resamples: int = 10000) -> float:
    """Unpaired permutation test of mean(a) - mean(b), e.g. two sets of runs of different sizes.

    alternative "less": H1 mean(a) < mean(b); "greater": H1 mean(a) > mean(b); "two-sided".
    Every relabeling of the pooled values when there are at most 20000, else `resamples` seeded
    ones with p = (1 + hits) / (1 + resamples).
    """
    a, b = [float(v) for v in a], [float(v) for v in b]
    if not a or not b:
        raise ValueError("permutation_p needs at least one value in each group")
    _check(alternative)
    pooled, na, nb = a + b, len(a), len(b)
    total = sum(pooled)
    scale = 1.0 + sum(abs(v) for v in pooled)

    def gap(sum_a: float) -> float:
        return sum_a / na - (total - sum_a) / nb

    observed = gap(sum(a))
    if math.comb(na + nb, na) <= MAX_ENUMERATED_SPLITS:
        draws = [gap(sum(pick)) for pick in combinations(pooled, na)]
        return _tail_share(draws, observed, alternative, scale) / len(draws)
    rng = random.Random(seed)
    draws = (gap(sum(rng.sample(pooled, na))) for _ in range(resamples))
    return (1 + _tail_share(draws, observed, alternative, scale)) / (1 + resamples)


def bootstrap_band(curves: list[list[float]], level: float = 0.95, seed: int = 0,
                   resamples: int = 2000) -> list[Estimate]:
    """Per position of equal-length curves (one per run, e.g. the best score so far at each
    generation): the mean over runs and a percentile bootstrap interval from resampling whole
    runs, the same resampled runs at every position so the band moves as the runs do."""
    curves = [[float(v) for v in c] for c in curves]
    if not curves or len({len(c) for c in curves}) != 1:
        raise ValueError("bootstrap_band needs one or more curves of the same length")
    runs, rng = len(curves), random.Random(seed)
    picks = [rng.choices(range(runs), k=runs) for _ in range(resamples)] if runs > 1 else []
    band = []
    for column in zip(*curves):
        mean = sum(column) / runs
        if not picks:
            band.append(Estimate(mean, mean, mean, 1, level))
            continue
        low, high = _percentiles([sum(column[i] for i in pick) / runs for pick in picks], level)
        band.append(Estimate(mean, low, high, runs, level))
    return band
