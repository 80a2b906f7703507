"""What racing (loop.racing) saves on a run's evaluations, and what it costs in the node a run names best (issue 40).

No model and no sandbox: the simulated agents, task and meta agent of bench/search_strategies.py (latent
per-row skills on four kinds of rows, a meta agent's change moving them at random; read its docstring), at
the size of a paper-sized grading run: 100 train + 100 val + 100 test rows, a child screened on its first
10 train rows by the paper's rule (score_above 0, archive.promotion.decide), parents chosen by the paper's
score_child_prop (archive.selection.select_parent over search.parent_selection.candidates_among, as the
loop builds them), the best by `highest` (archive.promotion.choose_best). Rows cost differently: row r
costs `row_usd` x c_r, c_r log-normal with mean 1 (a long proof and its grading cost more than a short one).

Racing on and off run the same generations with the same seeds and draws (common random numbers: generation
g mutates and evaluates with the same numbers in both), so a difference is racing's. With racing off a
promoted child is evaluated on the rest of train and all of val. With it on, the race is the loop's own
(search/racing.py `race`, its target from `target_of` and the promotion rule's `race_bar`, as
optimizer/racing.py asks for it): val in chunks of `--chunk` rows against the score of the best node so far;
a raced-out child keeps its val rows, is selected on their mean and is never the best, and the rest of train
is paid only by a child that finished its race.

It prints:
- the sequential test's error, simulated: how often a child whose true skill is exactly its target (the
  worst case) is raced out, over `--trials` races per target, against `racing_alpha`; and in the runs, the
  share of raced-out children whose true val skill reached the target they were raced against;
- per setting, the runs' evaluation spend, promoted and raced-out children, and the true test skill (the
  expected test score, no sampling noise) of the node each run names best, with 95% intervals;
- last, `eval spend racing/full=R quality difference=D [LO, HI]`: R the ratio of the two settings'
  total evaluation spend, D the mean paired difference of the chosen node's true test skill (racing minus
  full) with its 95% bootstrap interval over seeds.

    python bench/evaluation_cost.py                 # 200 seeds, 40 generations
    python bench/evaluation_cost.py --write         # also rewrites its section of docs/search.md
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import search_strategies as sim  # noqa: E402

from archive.promotion import BestChoice, Promotion, choose_best, decide  # noqa: E402
from archive.selection import select_parent  # noqa: E402
from search.racing import ALPHA, CHUNK, Racing, Target, race, target_of  # noqa: E402
from search.registry import promotion_rule  # noqa: E402
from search.stats import bootstrap_mean, interval, interval_text  # noqa: E402

PAGE = ROOT / "docs" / "search.md"
BEGIN = "<!-- evaluation_cost: written by python bench/evaluation_cost.py --write -->"
END = "<!-- evaluation_cost end -->"
TARGETS = (0.3, 0.5, 0.7, 0.9)  # the error check's targets: a child of exactly this true skill


@dataclass
class Child(sim.Node):
    raced_out: bool = False
    true_val: float = 0.0  # its expected val score

    def selection_score(self, world: sim.World) -> float | None:
        """archive.store's rule: a raced-out node on the mean of the rows it has, unscaled."""
        if self.raced_out:
            return sum(self.val_rows.values()) / len(self.val_rows)
        return super().selection_score(world)


@dataclass
class Spend:
    usd: float = 0.0
    promoted: int = 0
    raced_out: int = 0
    wrongly_out: int = 0  # raced out although its true val skill reached its target
    nodes: list[Child] = field(default_factory=list)


def as_target(node: Child, world: sim.World) -> Target:
    """A node as a race's target, as the loop makes it (optimizer.loop's _target): its score."""
    score = node.selection_score(world)
    assert score is not None, "the best has a score"
    return Target(score, f"the best node {node.node_id}'s score {score:.3f}")


def rule_bar() -> Target | None:
    """The promotion rule's own bar (its race_bar; the paper's score_above has none)."""
    bar = getattr(promotion_rule(Promotion().rule), "race_bar", None)
    return bar(None, None) if bar is not None else None


def best_of(nodes: list[Child], world: sim.World) -> Child | None:
    """The loop's best: choose_best over valid nodes that were not raced out (archive.records.Node.can_be_best)."""
    return choose_best([n for n in nodes if n.valid_parent and not n.raced_out], lambda n: n.selection_score(world),
                       lambda n: n.val_rows, BestChoice())


def evaluate(node: Child, task: sim.Task, world: sim.World, draws: sim.Draws, costs: np.ndarray,
             racing: Racing | None, best: Child | None, spend: Spend) -> None:
    """Screen `node`, then evaluate it in full or race it (module docstring); its rows' costs into `spend`."""
    p = sim.skills(node, task)
    n = world.rows
    node.true_skill, node.true_val = float(p[2 * n:].mean()), float(p[n:2 * n].mean())
    stage = {f"t{i}": float(u < p[i]) for i, u in enumerate(draws.stage)}
    node.stage_score = sum(stage.values()) / len(stage)
    spend.usd += float(costs[:world.stage_rows].sum())
    if not decide(Promotion(), world.stage_above, stage).promote:
        return
    spend.promoted += 1
    val = {f"v{i}": float(u < p[n + i]) for i, u in enumerate(draws.val)}
    target = None if racing is None or best is None else target_of(as_target(best, world), rule_bar())
    if target is not None:
        ids = list(val)

        def rows(upto: Mapping[str, int]) -> dict[str, list[float]]:
            return {sim.DOMAIN: [val[i] for i in ids[:upto[sim.DOMAIN]]]}

        verdict = race(racing, target, {sim.DOMAIN: (0, n)}, rows)
        if verdict.raced_out:
            node.val_rows = {f"{sim.DOMAIN}/{i}": val[i] for i in ids[:verdict.rows]}
            node.raced_out = True
            spend.usd += float(costs[n:n + verdict.rows].sum())
            spend.raced_out += 1
            spend.wrongly_out += sum(val.values()) / n > target.bar
            return
    val = {f"{sim.DOMAIN}/{i}": v for i, v in val.items()}
    node.full, node.val_rows = True, val
    spend.usd += float(costs[world.stage_rows:2 * n].sum())


def simulate(world: sim.World, seed: int, generations: int, racing: Racing | None) -> tuple[Child, Spend]:
    """One seeded run of the paper's search (no budget: the same generations with and without racing); the
    node it names best and what its evaluations cost."""
    task = sim.Task.draw(world, seed)
    costs = np.random.default_rng([seed, 0xC057]).lognormal(-0.125, 0.5, size=3 * world.rows)  # mean 1
    spend = Spend()
    initial = Child("initial", 0, None, np.zeros(world.kinds), np.zeros(3 * world.rows))
    evaluate(initial, task, world, sim.Draws(world, seed, 0), costs, None, None, spend)
    spend.nodes.append(initial)
    by_id = {initial.node_id: initial}
    for g in range(1, generations + 1):
        pool = sim.candidates(spend.nodes, world, False)  # type: ignore[arg-type]
        chosen = select_parent(pool, sim.PAPER, random.Random(f"{seed}/{g}"), sim.Variant(sim.PAPER, sim.PAPER)
                               .context(g))
        draws, parent = sim.Draws(world, seed, g), by_id[chosen.node_id]
        made = sim.mutate(parent, str(g), g, world, draws, sim.repeated(parent, spend.nodes, draws))  # type: ignore
        child = Child(**{f: getattr(made, f) for f in made.__dataclass_fields__})
        if child.status == sim.Status.OK:
            evaluate(child, task, world, draws, costs, racing, best_of(spend.nodes, world), spend)
        spend.nodes.append(child)
        by_id[child.node_id] = child
    best = best_of(spend.nodes, world)
    assert best is not None, "the initial node is always a valid parent with a score"
    spend.nodes = []  # the archive is no longer needed: 400 runs of it would hold hundreds of MB
    return best, spend


def error_rates(racing: Racing, rows: int, trials: int) -> list[tuple[float, float, float]]:
    """Per target t: over `trials` races of a child of true skill t (each of `rows` rows right with chance t,
    the worst case), the share raced out, and the share raced out whose full evaluation would have scored above
    t: the error racing controls."""
    rng, found = random.Random(0xE770), []
    for skill in TARGETS:
        out = wrong = 0
        for _ in range(trials):
            answers = [float(rng.random() < skill) for _ in range(rows)]
            verdict = race(racing, Target(skill, "the target"), {"d": (0, rows)},
                           lambda upto, answers=answers: {"d": answers[:upto["d"]]})
            out += verdict.raced_out
            wrong += verdict.raced_out and sum(answers) / rows > skill
        found.append((skill, out / trials, wrong / trials))
    return found


def _cell(values: list[float]) -> str:
    found = interval(values)
    return f"{found.mean:.3f} {interval_text(found.low, found.high)}"


def report(world: sim.World, racing: Racing, seeds: int, generations: int, trials: int) -> list[str]:
    """The bench's lines, the last one its verdict."""
    runs: dict[str, list[tuple[Child, Spend]]] = {"full": [], "racing": []}
    for seed in tqdm(range(seeds), desc="seeds", unit="seed", file=sys.stderr):
        runs["full"].append(simulate(world, seed, generations, None))
        runs["racing"].append(simulate(world, seed, generations, racing))
    lines = [f"racing: chunks of {racing.chunk} val rows, alpha {racing.alpha:g} spent O'Brien-Fleming-like; "
             f"{seeds} seeds x {generations} generations, {world.rows} train + {world.rows} val rows, screening "
             f"{world.stage_rows} train rows above {world.stage_above:g}, ${world.row_usd:g} a row on average", "",
             f"a child whose true skill is its target, in {trials} races:", "",
             "| target and true skill | raced out | raced out, its full evaluation above the target |",
             "|---|---|---|"]
    lines += [f"| {skill:.1f} | {out:.2%} | {wrong:.2%} |"
              for skill, out, wrong in error_rates(racing, world.rows, trials)]
    spent_racing = runs["racing"]
    wrong = sum(s.wrongly_out for _, s in spent_racing)
    out = sum(s.raced_out for _, s in spent_racing)
    lines += ["", f"in the runs: {out} children raced out, {wrong} of them ({wrong / max(out, 1):.2%}) with a true "
                  f"full val score above the target they were raced against", "",
              "| setting | eval spend a run ($) | promoted children | raced out | chosen node: true test skill [95%] |",
              "|---|---|---|---|---|"]
    for name, found in runs.items():
        lines.append(f"| {name} | {np.mean([s.usd for _, s in found]) * world.row_usd:.2f} | "
                     f"{np.mean([s.promoted for _, s in found]):.1f} | {np.mean([s.raced_out for _, s in found]):.1f} "
                     f"| {_cell([b.true_skill for b, _ in found])} |")
    ratio = sum(s.usd for _, s in runs["racing"]) / sum(s.usd for _, s in runs["full"])
    differences = [r.true_skill - f.true_skill for (r, _), (f, _) in zip(runs["racing"], runs["full"])]
    low, high = bootstrap_mean(differences)
    lines += ["", f"eval spend racing/full={ratio:.2f} quality difference={np.mean(differences):+.3f} "
                  f"{interval_text(low, high)}"]
    return lines


def write_section(lines: list[str]) -> None:
    """Replace the text between BEGIN and END in docs/search.md with `lines` (the bench's output as Markdown)."""
    text = PAGE.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "\n".join(line if line.startswith("|") or not line else line for line in lines[:-1])
    PAGE.write_text(f"{head}{BEGIN}\n{body}\n\n`{lines[-1]}`\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200, help="paired runs (default 200)")
    ap.add_argument("--generations", type=int, default=40, help="generations a run (default 40)")
    ap.add_argument("--chunk", type=int, default=CHUNK, help=f"val rows between two looks (default {CHUNK})")
    ap.add_argument("--alpha", type=float, default=ALPHA, help=f"racing_alpha (default {ALPHA:g})")
    ap.add_argument("--trials", type=int, default=20000, help="races per target of the error check (default 20000)")
    ap.add_argument("--write", action="store_true", help=f"rewrite its section of {PAGE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    racing = Racing(args.chunk, args.alpha)
    try:
        racing.check()
    except ValueError as e:
        ap.error(str(e))
    if args.seeds < 2 or args.generations < 1 or args.trials < 1:
        ap.error("--seeds must be at least 2, --generations and --trials at least 1")
    started = time.perf_counter()
    lines = report(sim.World(), racing, args.seeds, args.generations, args.trials)
    if args.write:
        write_section(lines)
    print("\n".join(lines[:-1]))
    print(f"simulated in {time.perf_counter() - started:.1f} s; peak RSS: this process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")
    print(lines[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
