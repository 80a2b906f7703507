"""Racing (`loop.racing`): a full evaluation that stops once the child can no longer matter.

Why. Past screening, a child pays for every row of its full evaluation (imo_grading: the 90 train rows
left and 100 val rows) even when, 30 val rows in, it plainly cannot become the run's best. Racing runs the
split the loop selects on (val; train for a domain without one) in chunks of `loop.racing_chunk` rows and,
after each chunk, asks whether the child can still reach its target; when it cannot, the evaluation
stops and the node is recorded with the rows it has, its verdict `raced_out` saying so. The rest of the
full evaluation (the other splits: imo_grading's train rows past the screening) runs only for a child
that finished its race, so a raced-out child costs its screening and the val rows of its race.

What a full evaluation decides, and so what a child must reach to matter:

- the run's best (the summary, the final test, the held-out grader, `sica`'s peer, `--initial_from`).
  Every bundled best choice (`highest`, `paired`, `heldout`) lets a node take the best's place only when
  its selection score is higher than the best's, so the target is the current best's selection score
  (the best among the nodes the child's generation chose from, as its screening's peer). A raced-out node
  is never the run's best: it has fewer rows than a node measured in full, and its race found that its
  full evaluation would not have beaten that score anyway.
- the next parents: a raced-out node stays a parent candidate, selected on the mean of the rows it has
  (not scaled down as a node stopped at screening is: its rows are an honest estimate, only noisier).
- its promotion rule's own bar, where the rule compares the child with another node
  (`PromotionRule.race_bar`): `not_worse_than_parent`, its parent's selection score (a child that may be
  as good as its parent deserves a full score to be a fair parent); `sica`, the low end of the best's 95%
  interval. `score_above` compares with no node: its floor was passed at screening.

A child is raced out only when it can reach neither: its target is the lowest of these bars.

The test. What a full evaluation decides is whether the child's score on all N rows of the split ends above
its target (every bundled best choice needs that first). So racing controls the chance of racing out a child
whose full evaluation would have ended above its target. At look k, after n_k rows with sum S, the child is
raced out when even the highest score it could plausibly still end with is below the target (an equal
score may still take the best's place, under loop.ties latest): (S + R) / N < target, where R bounds the
sum of the N - n_k rows left: (N - n_k) u + z sqrt((N - n_k) u (1 - u)),
u being Wilson's one-sided upper bound on the child's skill from the rows seen and z the normal quantile,
both at 1 - a_k / 2. A child stopped wrongly needs its skill above u, or its rows left above their bound
given a skill below u; each has chance at most a_k / 2 (to the normal approximation both bounds rest on),
so a look errs with chance at most a_k. Wilson's bound is exact-variance for right/wrong rows and conservative
for partial credit (a value in [0, 1] of mean p varies at most as a Bernoulli's), and needs no resampling:
cheap, deterministic (a resumed race reaches the same verdict), and it holds at the small levels early looks
use, where a bootstrap's tails are not resolved. The levels spend `loop.racing_alpha` over the looks that
can stop a child (all but the last) by an O'Brien-Fleming-like Lan-DeMets function,
alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) at the share t of those looks' rows seen, a_k = alpha(t_k) -
alpha(t_{k-1}); by the union bound a child is raced out wrongly with chance at most `racing_alpha` over all
its looks (bench/evaluation_cost.py simulates it: far below, the two bounds being loose together). Early
looks thus need a large gap, late ones less, and near the end a child that cannot catch up arithmetically
stops at once. With several domains, the target is on the mean of their scores (as best choice reads it) and
each domain's bound is at a_k / D. The target is taken as known: it is the score the decision compares with.

`race` drives a race with a callback that evaluates rows, so the loop (optimizer/evaluation.py) and the
bench run the same code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

CHUNK = 10  # loop.racing_chunk's default: rows of the selection split between two looks
ALPHA = 0.05  # loop.racing_alpha's default: the chance, over all looks, of racing out a child that mattered


@dataclass(frozen=True)
class Racing:
    """loop.racing's settings: rows between two looks, and the error spent over the looks."""

    chunk: int = CHUNK
    alpha: float = ALPHA

    def check(self) -> None:
        """ValueError in one line when the settings cannot be applied."""
        if type(self.chunk) is not int or not 1 <= self.chunk <= 10**6:
            raise ValueError(f"racing chunk must be a count of rows from 1 to 1000000, got {self.chunk!r}")
        if not (isinstance(self.alpha, (int, float)) and 1e-6 <= self.alpha < 0.5):
            raise ValueError(f"racing alpha must be a number from 0.000001 to below 0.5, got {self.alpha!r}")


@dataclass(frozen=True)
class Target:
    """What a child must reach to matter: a selection score (the run's scale: the mean over domains), whose
    it is, in words for the verdict."""

    bar: float
    why: str


@dataclass(frozen=True)
class RaceVerdict:
    """How a race ended: `raced_out` with the rows seen (of the split's), or finished (all rows)."""

    raced_out: bool
    rows: int  # rows of the selection split(s) seen, every domain's together
    total: int
    line: str  # for a person: the console, the node's record


def spent(alpha: float, share: float) -> float:
    """The error spent by the time `share` of the rows were seen (O'Brien-Fleming-like Lan-DeMets)."""
    if share <= 0.0:
        return 0.0
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(min(share, 1.0)))


def upper_bound(values: Sequence[float], level: float) -> float:
    """Wilson's one-sided upper bound at confidence `level` on the mean of `values` (each in [0, 1])."""
    n = len(values)
    if n == 0:
        return 1.0
    z = NormalDist().inv_cdf(level)
    p, z2 = sum(values) / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n))
    return min(1.0, centre + half)


def looks(start: int, total: int, chunk: int) -> list[int]:
    """The rows seen at each look, `chunk` by `chunk` from `start` (rows already evaluated), the last
    one all `total` rows."""
    if total <= start:
        return [total]
    return [min(total, start + chunk * k) for k in range(1, math.ceil((total - start) / chunk) + 1)]


Evaluate = Callable[[Mapping[str, int]], "Mapping[str, Sequence[float] | None]"]


def reachable(rows: Sequence[float], total: int, level: float) -> float:
    """The highest mean a split of `total` rows could still end with, given its first `rows`, at `level`: the
    rows left score at most their count times p's upper bound (Wilson, at 1 - level/2), plus z times the sd of
    their sum with that mean (a value in [0, 1] of mean p varies at most as a Bernoulli's), z at 1 - level/2."""
    n, left = len(rows), total - len(rows)
    if left <= 0:
        return sum(rows) / max(total, 1)
    p = upper_bound(rows, 1.0 - level / 2.0)
    z = NormalDist().inv_cdf(1.0 - level / 2.0)
    more = min(float(left), left * p + z * math.sqrt(left * p * (1.0 - p)))
    return (sum(rows) + more) / total if n else 1.0


def below(target: Target, scores: Mapping[str, Sequence[float]], totals: Mapping[str, int],
          level: float) -> tuple[bool, str]:
    """Whether the child's rows so far (domain -> scores) show it cannot reach `target` at `level`, with the
    evidence in words: the mean over domains of the highest score each could still end with (`reachable`, each
    at level / domains) is below the target's."""
    can = sum(reachable(scores[d], totals[d], level / len(scores)) for d in scores) / len(scores)
    mean = sum(sum(v) / max(len(v), 1) for v in scores.values()) / len(scores)
    out = can < target.bar  # an equal score may still take the best's place (loop.ties latest)
    return out, (f"{mean:.3f} so far, at most {can:.3f} at the end (one-sided level {level:.2g}) "
                 f"{'<' if out else '>='} {target.bar:.3f}")


def race(racing: Racing, target: Target, plan: Mapping[str, tuple[int, int]], evaluate: Evaluate) -> RaceVerdict:
    """Race a child on its selection split(s): `plan` maps each domain to (rows already evaluated, all its
    rows); `evaluate(rows)` evaluates each domain's first `rows[domain]` rows (the rows a chunk adds, a
    chunk's rows in parallel) and gives their scores (None: no scores to judge, and the race runs to the
    end). Stops at the first look whose bound is below `target.bar`."""
    racing.check()
    laps = {d: looks(start, total, racing.chunk) for d, (start, total) in plan.items()}
    count = max(map(len, laps.values()), default=0)
    total = sum(t for _, t in plan.values())
    # The error is spent over the looks that can race a child out, all but the last (its rows are all the rows).
    last = sum(lap[-2] if len(lap) > 1 else lap[-1] for lap in laps.values())
    before = 0.0
    judged = True
    for k in range(count):
        rows = {d: lap[min(k, len(lap) - 1)] for d, lap in laps.items()}
        scores = evaluate(rows)
        seen = sum(rows.values())
        if k == count - 1 or not judged:
            continue
        known = {d: rows for d in plan if (rows := scores.get(d))}
        if len(known) < len(plan):
            judged = False  # a split without row scores: nothing to judge, run to the end
            continue
        level = spent(racing.alpha, seen / last) - before
        before += level
        if not 1.0 - level / (2.0 * len(known)) < 1.0:  # an early look spends (next to) nothing: it cannot race out
            continue
        out, evidence = below(target, known, {d: t for d, (_, t) in plan.items()}, level)
        if out:
            return RaceVerdict(True, seen, total, f"raced out after {seen} of {total} rows: {evidence}; "
                                                  f"below {target.why}")
    return RaceVerdict(False, total, total, f"ran all {total} rows, never found below {target.why}")


def target_of(best: Target | None, rule_bar: Target | None) -> Target | None:
    """The lowest bar a child must reach to matter (module docstring), or None: no best yet, no race."""
    if best is None:
        return None
    return rule_bar if rule_bar is not None and rule_bar.bar < best.bar else best
