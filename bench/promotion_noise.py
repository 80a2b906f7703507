"""How often each promotion rule lets a worse child through, or stops a better one, at a stage's size.

A simulation, no model calls. Agents answer synthetic rows with a known true accuracy, and each
rule of search/promotion/ judges a child against its parent (true accuracy 0.5) on a screening
stage of 10 rows, then of 100 rows. Real agents fail on the same hard questions, so the answers
on a row are correlated through the row's difficulty:

    z_i ~ N(0, sd^2)           the difficulty of row i (shared by every agent)
    P(correct) = Phi(a - z_i)  for an agent of ability a, independently across agents given z_i
    a = sqrt(1 + sd^2) * Phi^-1(accuracy), so that E[Phi(a - z)] = accuracy

(a - z ~ N(a, sd^2), and P(N(0, 1) < N(a, sd^2)) = Phi(a / sqrt(1 + sd^2))). A larger `--sd`
means more shared difficulty, more correlated parent and child, and a sharper paired test.
The parent stands in for the best node too (as early in a run), so `sica` compares the child
with the parent's interval.

For each rule it prints the share of children promoted at each true accuracy, how often a worse
child (true accuracy < the parent's) is promoted, how often a better one is rejected, and the
expected evaluation cost per child (the stage's rows, plus 200 rows of full evaluation when
promoted); then a one-line recommendation read off those numbers.

    python bench/promotion_noise.py --trials 5000 --seed 0
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import sys
import time
from pathlib import Path
from statistics import NormalDist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from archive.promotion import Promotion, decide  # noqa: E402

PARENT = 0.5
CHILDREN = (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
STAGES = (10, 100)
FULL_ROWS = 200  # rows of the full evaluation a promoted child then runs (100 train + 100 val)
RULES = (("score_above", Promotion("score_above")),
         ("not_worse_than_parent p<0.05", Promotion("not_worse_than_parent", (("level", 0.05),))),
         ("not_worse_than_parent p<0.2", Promotion("not_worse_than_parent", (("level", 0.2),))),
         ("sica 95%", Promotion("sica")))


def ability(accuracy: float, sd: float) -> float:
    return math.sqrt(1 + sd * sd) * NormalDist().inv_cdf(accuracy)


def answers(a: float, difficulty: list[float], rng: random.Random) -> dict[str, float]:
    """One agent's 0/1 scores on the rows: row i right with probability Phi(a - z_i)."""
    return {f"q{i}": float(rng.random() < 0.5 * (1 + math.erf((a - z) / math.sqrt(2))))
            for i, z in enumerate(difficulty)}


def promote_rates(rows: int, trials: int, sd: float, seed: int) -> dict[str, list[float]]:
    """rule name -> the share of trials promoted, per child accuracy in CHILDREN. Every rule
    judges the same simulated rows and answers, so their differences are not sampling noise."""
    rng = random.Random(seed)
    parent_a = ability(PARENT, sd)
    promoted = {name: [0] * len(CHILDREN) for name, _ in RULES}
    for k, accuracy in enumerate(CHILDREN):
        child_a = ability(accuracy, sd)
        for _ in range(trials):
            difficulty = [rng.gauss(0.0, sd) for _ in range(rows)]
            parent, child = answers(parent_a, difficulty, rng), answers(child_a, difficulty, rng)
            for name, rule in RULES:
                promoted[name][k] += decide(rule, 0.0, child, parent=parent, best=parent).promote
    return {name: [count / trials for count in counts] for name, counts in promoted.items()}


def summary(rates: list[float], rows: int) -> tuple[float, float, float]:
    """(worse promoted, better rejected, expected rows per child), each child accuracy equally likely."""
    worse = [r for acc, r in zip(CHILDREN, rates) if acc < PARENT]
    better = [1 - r for acc, r in zip(CHILDREN, rates) if acc > PARENT]
    cost = sum(rows + FULL_ROWS * r for r in rates) / len(rates)
    return sum(worse) / len(worse), sum(better) / len(better), cost


def table(rows: int, found: dict[str, list[float]]) -> None:
    print(f"\nstage of {rows} rows: share of children promoted, by the child's true accuracy (parent {PARENT})")
    head = "".join(f"{acc:>6.2f}" for acc in CHILDREN)
    print(f"{'rule':<30}{head}  | worse promoted  better rejected  rows/child")
    for name, rates in found.items():
        worse, better, cost = summary(rates, rows)
        cells = "".join(f"{r:>6.2f}" for r in rates)
        print(f"{name:<30}{cells}  | {worse:>14.1%}  {better:>15.1%}  {cost:>10.0f}")


def best_rule(rows: int, found: dict[str, list[float]]) -> str:
    """The rule with the fewest wrong calls (worse promoted + better rejected), then the fewest rows."""
    def key(name: str) -> tuple[float, float]:
        worse, better, cost = summary(found[name], rows)
        return round(worse + better, 3), cost

    name = min(found, key=key)
    worse, better, cost = summary(found[name], rows)
    return f"{rows} rows: {name} ({worse:.0%} worse promoted, {better:.0%} better rejected, {cost:.0f} rows/child)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5000, help="simulated children per rule, stage and accuracy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sd", type=float, default=1.0, help="spread of the rows' difficulty (shared by all agents)")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.sd < 0:
        ap.error("--trials must be at least 1 and --sd not negative")
    print(f"promotion under noise: {args.trials} trials a cell, difficulty sd {args.sd}, seed {args.seed}; "
          f"P(correct) = Phi(a - z), z ~ N(0, {args.sd}^2) per row")
    started = time.perf_counter()
    found = {rows: promote_rates(rows, args.trials, args.sd, args.seed + rows) for rows in STAGES}
    for rows in STAGES:
        table(rows, found[rows])
    print("\nrecommendation (fewest worse promoted + better rejected, then fewest rows): "
          + "; ".join(best_rule(rows, found[rows]) for rows in STAGES))
    print(f"simulated in {time.perf_counter() - started:.1f} s")
    print(f"peak RSS: this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
