"""Parent-selection strategies compared on the same budget, in a simulation (issue 30).

No model and no sandbox: agents are vectors of latent per-row skills, and a run is the loop's
search with archive/selection.py choosing the parents, archive/promotion.py (search/promotion/) screening the
children and choosing the run's best node, as a real run calls them.

The task. Three splits of `--rows` rows each (train, val, test, as imo_grading's 100/100/100).
Row r has a kind k_r (one of 4: the sorts of question a change can be good or bad at) and a
difficulty z_r ~ N(0, 1). An agent is an ability per kind a_k and an offset per row u_r; its
chance of being right on row r is

    p_r = 1 / (1 + exp(-(a_{k_r} + u_r - z_r)))     (0 on every row when the agent is broken)

The initial agent has a_k = 0 and u = 0: about 0.5 on every split.

A generation. The parent is chosen among the candidates built as archive.store's
Archive.candidates builds them (below), with the loop's generator for a seeded run. The meta
agent's outcome, drawn with the shares of `World`: no change, meta agent failed, task agent
that does not load (each costs the meta call and no row), a child that answers nothing
(broken: it scores 0 on the first stage and stops), or a change: every ability moves by
N(-0.05, 0.15) (most edits are small and slightly more often harmful), one kind's by
N(0, 0.5) more (a change aimed at one sort of question), every row's offset by N(0, 0.2)
(answers that flip for no general reason). A child of a broken node is repaired half the
time, else broken too.

Repeats. A meta agent shown the same code and feedback again often has the same idea again. So
a share `repeat` (15%) of the changes re-make an earlier change the meta agent could have seen:
one of the parent's earlier children that made a change (the same code, the same feedback), or
one of the changes already in the parent's code (its own and its ancestors'), drawn uniformly.
A sibling's change gives that sibling again; a change already made gives the parent again; each
with its row offsets moved by N(0, 0.02) (the same edit, a few answers that differ). A parent
with no such change (the initial node before its first child) gets an ordinary change. With
novelty screening (Variant.novelty, loop.novelty_threshold) every repeat is caught (its diff's
lines match; the simulation assumes no miss and no false alarm): it is recorded `duplicate`, is
no parent and costs its meta call and no row. Without it, a repeat is screened and evaluated
like any child: an agent the archive already holds, paid for again, with a fresh noisy score.

Merges. In a merge generation (Variant.merge_every, loop.merge_every: every Nth) the parent is
chosen as usual, then archive.selection's `merge_partner` picks the second parent from the
candidates with their per-row val scores and the lineages of first parents, as the loop does; no
partner, an ordinary generation. The meta agent's outcome is drawn as above (a merge can fail
or break the agent too, and is never a repeat). A change combines the two: per kind, the parent
with more right answers on that kind's val rows (what a meta agent reading both parents' results
can see: noisy) gives `merge_weight` (0.75) of the ability and of those rows' offsets, the other
the rest (half each on a tie); then every ability loses `merge_loss` (0.1: two programs joined
into one interfere, and what made each good is partly lost), and the usual move of a change is
added. So a merge of two parents good on different kinds can beat both, and a merge of two
alike parents is a change 0.1 worse than an ordinary one: no free improvement. The child
records both parents; lineage follows the first, as in the loop.

Evaluation, at the loop's default sizes and rule: the first 10 train rows, each right with
chance p_r (one Bernoulli draw per row); promoted by `score_above` 0 (the paper's rule,
loop.promotion's default), then the rest of train and all of val. Selection reads val: a
fully evaluated node's val score and its per-row val scores (for pareto), a node that stopped
at screening its 10-row train score x 10/100 (loop.staged_score train), the initial node its
val score (loop.scale_initial off). The best node is search/best_choice/highest.py.

Budget. Every variant gets the same generations and the same dollars: a meta call costs
`--meta_usd`, a row `--row_usd` (imo_grading with o4-mini is about $0.01 a row); a generation
starts only when its worst case (meta call and full evaluation) fits in what is left, so no run
spends more than the budget, and a variant whose children are evaluated more often stops sooner.

Outcome, per run: the true skill (mean p_r over the test rows: the expected test score, no
sampling noise) of the node the run names best, and of the archive's truly best node (the
oracle: what a perfect final choice would get). Over `--seeds` seeds, with 95% bootstrap
intervals, and per seed the difference from the paper's strategy with a two-sided paired
sign-flip test (search.stats). Variants are paired: a seed is one task and one initial agent,
and generation g draws the same mutation and evaluation noise in every variant (common random
numbers), so the differences are the strategies', not the draws'. Each variant with merges or
novelty is also compared, the same way, with its strategy alone: what the feature adds.

A variant is a row of VARIANTS: a name, the strategy and its settings; a feature that changes
the generation itself (merges, novelty screening) is a field of `Variant` read by `simulate`.
The repeats and merges' model is the same in every variant: a variant without novelty pays for
its repeats, one without merges never merges.

    python bench/search_strategies.py --seeds 200 --generations 40
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from archive.promotion import BestChoice, Promotion, choose_best, decide  # noqa: E402
from archive.records import Status  # noqa: E402
from archive.selection import (  # noqa: E402
    Candidate,
    Context,
    lineage,
    merge_partner,
    needs_rows,
    select_parent,
)
from search.parent_selection import candidates_among  # noqa: E402
from search.stats import bootstrap_mean, interval, interval_text, paired_p  # noqa: E402
from services.strategy_names import strategy_names  # noqa: E402

PAPER = "score_child_prop"
DOMAIN = "imo_grading"  # whose sizes and stage the simulation takes; the name its rows are keyed under
MERGE_EVERY = 5  # loop.merge_every of the variants that merge


@dataclass(frozen=True)
class World:
    """The simulated task, agents and prices (see the module's docstring)."""

    rows: int = 100  # rows of each split: train, val, test
    stage_rows: int = 10  # the first stage: the first rows of train (loop.stages' default)
    stage_above: float = 0.0  # the stage's bar (score_above)
    kinds: int = 4
    difficulty_sd: float = 1.0
    drift: tuple[float, float] = (-0.05, 0.15)  # every ability's move: mean, sd
    focus_sd: float = 0.5  # one kind's extra move
    row_sd: float = 0.2  # every row offset's move
    no_change: float = 0.10  # shares of the meta agent's outcomes
    meta_failed: float = 0.05
    load_failed: float = 0.05
    broken: float = 0.05
    repaired: float = 0.5  # a broken node's child is repaired this often
    repeat: float = 0.15  # share of changes that re-make an earlier change (module docstring: Repeats)
    repeat_sd: float = 0.02  # a repeat's move of every row offset
    merge_weight: float = 0.75  # a merge keeps this much of the parent better on a kind's val rows
    merge_loss: float = 0.1  # every ability's loss when two programs are combined into one
    row_usd: float = 0.01
    meta_usd: float = 2.0

    @property
    def full_rows(self) -> int:
        """Rows a promoted child costs in all: the stage's, the rest of train, val."""
        return 2 * self.rows

    def worst_generation_usd(self) -> float:
        return self.meta_usd + self.full_rows * self.row_usd


@dataclass(frozen=True)
class Variant:
    """One row of the table: a strategy of archive/selection.py and its settings."""

    name: str
    strategy: str
    ties: str = "latest"
    merge_every: int = 0  # loop.merge_every: 0, no merges
    novelty: bool = False  # loop.novelty_threshold set: repeats are caught, recorded duplicate, not evaluated

    def context(self, generation: int) -> Context:
        return Context(generation, self.ties)


# The paper's first: every other row is compared with it. random, latest and best are the baselines. Merges and
# novelty screening on the paper's rule and on pareto, alone and together.
VARIANTS = [Variant(PAPER, PAPER)] + [Variant(name, name) for name in strategy_names("parent_selection")
                                      if name != PAPER] + [
    Variant(strategy + suffix, strategy, merge_every=merge_every, novelty=novelty)
    for strategy in (PAPER, "pareto")
    for suffix, merge_every, novelty in (("+merge", MERGE_EVERY, False), ("+novelty", 0, True),
                                         ("+merge+novelty", MERGE_EVERY, True))]


@dataclass
class Task:
    """One seed's rows: train, val and test one after the other."""

    kind: np.ndarray
    difficulty: np.ndarray

    @classmethod
    def draw(cls, world: World, seed: int) -> Task:
        rng = np.random.default_rng([seed, 0xDA7A])  # a stream apart from the generations' [seed, g]
        n = 3 * world.rows
        return cls(rng.integers(world.kinds, size=n), rng.normal(0.0, world.difficulty_sd, size=n))


@dataclass
class Node:
    node_id: str
    generation: int
    parent: str | None
    ability: np.ndarray
    offset: np.ndarray
    broken: bool = False
    status: Status = Status.OK
    stage_score: float | None = None  # the first stage's train score
    full: bool = False
    val_rows: dict[str, float] = field(default_factory=dict)  # "domain/row id" -> 0 or 1, full evaluations only
    true_skill: float = 0.0  # the expected score on test
    other_parent: str | None = None  # a merge's second parent
    repeats: str | None = None  # the node whose change this one re-makes

    @property
    def valid_parent(self) -> bool:
        return self.status == Status.OK

    def selection_score(self, world: World) -> float | None:
        """archive.store.selection_score with the loop's defaults."""
        if self.full:
            return sum(self.val_rows.values()) / len(self.val_rows)
        if self.stage_score is None:
            return None
        return self.stage_score * world.stage_rows / world.rows


def skills(node: Node, task: Task) -> np.ndarray:
    """P(right) on every row of the three splits."""
    if node.broken:
        return np.zeros(len(task.kind))
    return 1.0 / (1.0 + np.exp(-(node.ability[task.kind] + node.offset - task.difficulty)))


class Draws:
    """Generation g's random numbers in a seed, drawn in one fixed order whatever the outcome, so
    every variant's generation g mutates and evaluates with the same numbers."""

    def __init__(self, world: World, seed: int, generation: int) -> None:
        rng = np.random.default_rng([seed, generation])
        self.outcome = float(rng.random())
        self.drift = float(rng.normal(*world.drift))
        self.kind = int(rng.integers(world.kinds))
        self.focus = float(rng.normal(0.0, world.focus_sd))
        self.offset = rng.normal(0.0, world.row_sd, size=3 * world.rows)
        self.repair = float(rng.random())
        self.stage = rng.random(world.stage_rows)
        self.val = rng.random(world.rows)
        self.repeat = float(rng.random())  # drawn last, so the draws above are those of a world without repeats
        self.source = float(rng.random())
        self.jitter = rng.normal(0.0, world.repeat_sd, size=3 * world.rows)


def repeated(parent: Node, nodes: list[Node], draws: Draws) -> Node | None:
    """The earlier change a repeat re-makes: one of `parent`'s children that made a change, or
    one already in its code (its own, its ancestors'); None when there is none."""
    made = [n for n in nodes if n.parent is not None and n.status in (Status.OK, Status.DUPLICATE)]
    ancestors = lineage(parent.node_id, {n.node_id: n.parent for n in nodes})
    sources = [n for n in made if n.parent == parent.node_id or n.node_id in ancestors]
    return sources[int(draws.source * len(sources))] if sources else None


def merged(first: Node, partner: Node, task: Task, world: World) -> tuple[np.ndarray, np.ndarray]:
    """A merge's abilities and row offsets before the move of a change: per kind, `merge_weight`
    of the parent with more right answers on that kind's val rows (half each on a tie)."""
    val_kind = task.kind[world.rows:2 * world.rows]
    weight = np.full(world.kinds, 0.5)
    for k in range(world.kinds):
        rows = [f"{DOMAIN}/v{i}" for i in np.flatnonzero(val_kind == k)]
        lead = sum(first.val_rows[r] for r in rows) - sum(partner.val_rows[r] for r in rows)
        weight[k] = 0.5 if lead == 0 else world.merge_weight if lead > 0 else 1.0 - world.merge_weight
    per_row = weight[task.kind]
    return (weight * first.ability + (1.0 - weight) * partner.ability,
            per_row * first.offset + (1.0 - per_row) * partner.offset)


def mutate(parent: Node, node_id: str, generation: int, world: World, draws: Draws,
           repeat_of: Node | None = None, merge: tuple[Node, Task] | None = None) -> Node:
    """The meta agent's child of `parent`: its outcome, and for a change the moved skills. A repeat
    of `repeat_of` (drawn with the share `world.repeat`) is that node again or, when its change is
    already in `parent`'s code, `parent` again; `merge` (the second parent and the task) combines
    the two parents before the move. Never both."""
    child = Node(node_id, generation, parent.node_id, parent.ability, parent.offset, parent.broken,
                 other_parent=merge[0].node_id if merge else None)
    cut = draws.outcome
    for status, share in ((Status.NO_CHANGE, world.no_change), (Status.META_FAILED, world.meta_failed),
                          (Status.LOAD_FAILED, world.load_failed)):
        if cut < share:
            child.status = status
            return child
        cut -= share
    if merge is None and repeat_of is not None and draws.repeat < world.repeat:
        again = repeat_of if repeat_of.parent == parent.node_id else parent
        child.ability, child.offset, child.broken = again.ability, again.offset + draws.jitter, again.broken
        child.repeats = repeat_of.node_id
        return child
    ability, offset = (parent.ability, parent.offset) if merge is None else merged(parent, *merge, world)
    child.ability = ability + draws.drift - (world.merge_loss if merge else 0.0)
    child.ability[draws.kind] += draws.focus
    child.offset = offset + draws.offset
    child.broken = cut < world.broken or (parent.broken and draws.repair >= world.repaired)
    return child


def evaluate(node: Node, task: Task, world: World, draws: Draws) -> int:
    """Screen `node` on the first train rows, then evaluate it in full when promoted; the rows paid."""
    p = skills(node, task)
    node.true_skill = float(p[2 * world.rows:].mean())
    stage = {f"t{i}": float(u < p[i]) for i, u in enumerate(draws.stage)}
    node.stage_score = sum(stage.values()) / len(stage)
    if not decide(Promotion(), world.stage_above, stage).promote:
        return world.stage_rows
    node.full = True
    node.val_rows = {f"{DOMAIN}/v{i}": float(u < p[world.rows + i]) for i, u in enumerate(draws.val)}
    return world.full_rows


def candidates(nodes: list[Node], world: World, with_rows: bool) -> list[Candidate]:
    """The loop's candidates (search.parent_selection.candidates_among, as Archive.candidates makes them) over one
    domain: valid parents with a score, children counted over every generation started from them."""
    children = Counter(n.parent for n in nodes)
    return candidates_among(nodes, children, lambda n: n.selection_score(world),
                            (lambda n: n.val_rows) if with_rows else None)


@dataclass
class Run:
    """What one simulated run leaves: its archive in generation order and what it paid."""

    nodes: list[Node]
    spent: float = 0.0
    generations: int = 0  # generations run before either limit

    def best(self, world: World) -> Node:
        """The node the run names best: search/best_choice/highest.py, the loop's default."""
        valid = [n for n in self.nodes if n.valid_parent]
        found = choose_best(valid, lambda n: n.selection_score(world), lambda n: n.val_rows, BestChoice())
        assert found is not None, "the initial node is always a valid parent with a score"
        return found


def simulate(variant: Variant, world: World, seed: int, generations: int, budget_usd: float) -> Run:
    """One seeded run of `variant`: the initial node, then generations until either limit."""
    task = Task.draw(world, seed)
    initial = Node("initial", 0, None, np.zeros(world.kinds), np.zeros(3 * world.rows))
    found = Run([initial], evaluate(initial, task, world, Draws(world, seed, 0)) * world.row_usd)
    by_id = {initial.node_id: initial}
    for g in range(1, generations + 1):
        if found.spent + world.worst_generation_usd() > budget_usd:
            break
        merging = bool(variant.merge_every) and g % variant.merge_every == 0
        pool = candidates(found.nodes, world, merging or needs_rows(variant.strategy))
        chosen = select_parent(pool, variant.strategy,
                               random.Random(f"{seed}/{g}"),  # the loop's generator for generation g of a seeded run
                               variant.context(g))
        partner = merge_partner(pool, chosen.node_id, {n.node_id: n.parent for n in found.nodes},
                                variant.ties) if merging else None
        draws, parent = Draws(world, seed, g), by_id[chosen.node_id]
        child = mutate(parent, str(g), g, world, draws, repeated(parent, found.nodes, draws),
                       (by_id[partner.node_id], task) if partner else None)
        found.spent += world.meta_usd
        if child.repeats is not None and variant.novelty:
            child.status = Status.DUPLICATE  # caught before evaluation: the meta call is paid, no row
        if child.status == Status.OK:
            found.spent += evaluate(child, task, world, draws) * world.row_usd
        found.nodes.append(child)
        by_id[child.node_id] = child
        found.generations = g
    return found


@dataclass(frozen=True)
class Outcome:
    chosen: float  # true skill of the node the run names best
    oracle: float  # true skill of the archive's truly best node
    initial: float
    spent: float
    generations: int
    screened: int  # children that ran the first stage
    promoted: int  # children evaluated in full
    merges: int  # children of two parents
    repeats: int  # children that re-made an earlier change, evaluated or caught

    @classmethod
    def of(cls, run: Run, world: World) -> Outcome:
        children = [n for n in run.nodes[1:] if n.stage_score is not None]
        return cls(run.best(world).true_skill, max(n.true_skill for n in run.nodes if n.valid_parent),
                   run.nodes[0].true_skill, run.spent, run.generations, len(children),
                   sum(n.full for n in children), sum(n.other_parent is not None for n in run.nodes),
                   sum(n.repeats is not None for n in run.nodes))


def compare(variants: list[Variant], world: World, seeds: int, generations: int,
            budget_usd: float) -> dict[str, list[Outcome]]:
    """Variant name -> its outcome on each seed 0 .. seeds-1."""
    return {v.name: [Outcome.of(simulate(v, world, seed, generations, budget_usd), world) for seed in range(seeds)]
            for v in variants}


def _cell(values: list[float]) -> str:
    found = interval(values)
    return f"{found.mean:.3f} {interval_text(found.low, found.high)}"


def _versus(values: list[float], reference: list[float]) -> tuple[str, str]:
    """The mean paired difference with its bootstrap interval (never Wilson's: differences that happen
    to be all 0 or 1 are no accuracy rows), and the two-sided p-value."""
    value = paired_p(values, reference, "two-sided")
    differences = [a - b for a, b in zip(values, reference)]
    low, high = bootstrap_mean(differences)
    return (f"{sum(differences) / len(differences):.3f} {interval_text(low, high)}",
            f"{value:.3f}" if value >= 0.001 else "<0.001")


def table(results: dict[str, list[Outcome]]) -> list[str]:
    """The table's lines: per variant, the chosen and oracle true skills with 95% intervals, the
    paired difference from the paper's strategy and its p-value, and what the runs spent."""
    paper = [o.chosen for o in results[PAPER]]
    wide = max(len(name) for name in results) + 2
    head = (f"{'variant':<{wide}}{'chosen node: true skill':<26}{'vs ' + PAPER:<26}{'p':>7}  "
            f"{'oracle best in archive':<26}{'$ spent':>8}{'gens':>6}{'screened':>9}{'full':>6}{'merges':>7}"
            f"{'repeats':>8}")
    lines = [head, "-" * len(head)]
    for name, outcomes in results.items():
        chosen = [o.chosen for o in outcomes]
        versus, p = ("-", "-") if name == PAPER else _versus(chosen, paper)
        n = len(outcomes)
        lines.append(f"{name:<{wide}}{_cell(chosen):<26}{versus:<26}{p:>7}  "
                     f"{_cell([o.oracle for o in outcomes]):<26}"
                     f"{sum(o.spent for o in outcomes) / n:>8.1f}{sum(o.generations for o in outcomes) / n:>6.1f}"
                     f"{sum(o.screened for o in outcomes) / n:>9.1f}{sum(o.promoted for o in outcomes) / n:>6.1f}"
                     f"{sum(o.merges for o in outcomes) / n:>7.1f}{sum(o.repeats for o in outcomes) / n:>8.1f}")
    return lines


def features(results: dict[str, list[Outcome]], variants: list[Variant]) -> list[str]:
    """Each variant with merges or novelty screening against the same strategy without them: what
    the feature itself adds, as a paired difference of the chosen node's true skill."""
    plain = {v.strategy: v.name for v in variants if not v.merge_every and not v.novelty}
    lines = []
    for v in variants:
        base = plain.get(v.strategy)
        if (v.merge_every or v.novelty) and base is not None:
            versus, p = _versus([o.chosen for o in results[v.name]], [o.chosen for o in results[base]])
            lines.append(f"{v.name} vs {base}: {versus}, p {p}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=None, help="runs per variant (default 200; --quick 30)")
    ap.add_argument("--generations", type=int, default=None, help="generations per run (default 40; --quick 20)")
    ap.add_argument("--budget_usd", type=float, default=None,
                    help="dollars per run (default: what the generations cost when three children in four are "
                         "evaluated in full, about the average: $140 for 40 generations of 100-row splits)")
    ap.add_argument("--rows", type=int, default=100, help="rows of each split (train, val, test)")
    ap.add_argument("--repeat", type=float, default=World.repeat,
                    help=f"share of changes that re-make an earlier one (default {World.repeat:g})")
    ap.add_argument("--merge_loss", type=float, default=World.merge_loss,
                    help=f"every ability's loss in a merge (default {World.merge_loss:g})")
    ap.add_argument("--quick", action="store_true", help="fewer seeds and generations, a smoke run of seconds")
    args = ap.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (30 if args.quick else 200)
    generations = args.generations if args.generations is not None else (20 if args.quick else 40)
    if seeds < 2 or generations < 1 or args.rows < 10:
        ap.error("--seeds must be at least 2, --generations at least 1 and --rows at least 10")
    if not 0.0 <= args.repeat <= 1.0 or not math.isfinite(args.merge_loss):
        ap.error("--repeat must be a share from 0 to 1 and --merge_loss a number")
    world = World(rows=args.rows, repeat=args.repeat, merge_loss=args.merge_loss)
    budget = args.budget_usd if args.budget_usd is not None else \
        generations * (world.meta_usd + 0.75 * world.full_rows * world.row_usd)
    if not (budget > 0 and math.isfinite(budget)):
        ap.error("--budget_usd must be a positive number")
    print(f"search strategies on the same budget: {seeds} seeds, {generations} generations, ${budget:.2f} a run "
          f"(meta call ${world.meta_usd:g}, row ${world.row_usd:g}); {world.rows} rows a split, "
          f"screening {world.stage_rows} rows above {world.stage_above:g}, selection on val, best by `highest`; "
          f"{world.repeat:.0%} of changes repeat one, a merge loses {world.merge_loss:g}")
    started = time.perf_counter()
    results = compare(VARIANTS, world, seeds, generations, budget)
    initial = [o.initial for o in results[PAPER]]
    print(f"true skill (expected test score) of the initial agent: {_cell(initial)}\n")
    print("\n".join(table(results)))
    print(f"\nchosen: the node the run names best (highest val score); oracle: the archive's truly best node; "
          f"vs {PAPER}: mean paired difference, p two-sided sign-flip test; gens, screened, full, merges (children of "
          f"two parents), repeats (children re-making an earlier change): means per run")
    print("\nwhat merges and novelty screening add to the same strategy (chosen node, paired):")
    print("\n".join(features(results, VARIANTS)))
    print(f"simulated in {time.perf_counter() - started:.1f} s")
    print(f"peak RSS: this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
