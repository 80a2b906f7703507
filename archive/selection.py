"""Parent selection: which archive node the next generation starts from.

Pure functions over `Candidate`s, registered by name, with the weights of the HyperAgents
reference (utils/gl_utils.py, select_parent):

- `score_prop`: weight sigmoid(10 (s - mid)), mid = mean of the top-3 scores;
- `score_child_prop` (default): that times exp(-(children / 8)^3), so a node that has
  already been expanded many times gives way to others;
- `best` (equal scores: the latest node, or with ties="earliest" the earliest, as the
  reference's `max` over the archive in order), `latest`, `random`. Scores within
  `Context.tolerance` of each other are equal (see `highest`).

Beyond the reference (issue 30), strategies that read more than one mean score:

- `pareto`: GEPA's per-instance Pareto front. For each row of the selection split, the nodes
  that score highest on it; a node that is on some row's front only beside others that stay
  kept is dropped (lowest mean first); each remaining node is drawn in proportion to the rows
  it leads on. A node best on a few hard rows survives a lower mean. Only full evaluations
  have rows: nodes that stopped at screening are not on the front.
- `islands`: the archive as `islands` sub-archives. Generation g draws its parent from island
  g mod K with `score_child_prop` and its child lives there; the initial node is on every
  island. Every `migrate_every` generations each island's best node joins the next island
  (a ring), so good changes spread without one lineage taking over every island. Which
  island a node is on follows from its generation, so a resumed run needs no state of its own.

Which scores the candidates carry (staged-only and initial nodes) is archive.store's
`ScoreRule`. The randomness comes from the caller's `random.Random`, so a seeded run replays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

# Scores closer than this are one score, by default (loop.tie_tolerance). A selection score is a share of
# rows, scaled by a stage's share and averaged over domains, and one value reached by two orders of
# arithmetic differs in its last bits (0.7 x (10/100) is 0.06999999999999999, 7/100 is 0.07): about 1e-16
# on a score of at most 1. Two scores that truly differ, shares of up to 100,000 rows a split, differ by
# 1e-11 or more even so scaled.
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class Candidate:
    node_id: str
    score: float  # mean over domains of the selection score (see archive.store.selection_score)
    children: int  # nodes already made from this one
    order: int  # creation order: higher is newer
    generation: int = 0  # the generation that made it (0: the initial node)
    parent: str | None = None
    rows: Mapping[str, float] = field(default_factory=dict)  # "domain/row id" -> its score, full evaluations only


@dataclass(frozen=True)
class Context:
    """What a strategy may read besides the candidates: who is choosing and the strategy's settings."""

    generation: int = 0  # the generation whose parent is chosen
    ties: str = "latest"  # latest | earliest: which of equal candidates is preferred
    islands: int = 4  # islands: how many sub-archives
    migrate_every: int = 10  # islands: generations between migrations
    tolerance: float = TIE_TOLERANCE  # scores within this of each other are equal (0: the reference's float `max`)


def _sigmoid_weights(candidates: list[Candidate]) -> list[float]:
    top3 = sorted((c.score for c in candidates), reverse=True)[:3]
    mid = sum(top3) / len(top3)
    return [1.0 / (1.0 + math.exp(-10.0 * (c.score - mid))) for c in candidates]


def _child_weights(candidates: list[Candidate]) -> list[float]:
    return [w * math.exp(-((c.children / 8.0) ** 3)) for w, c in zip(_sigmoid_weights(candidates), candidates)]


_T = TypeVar("_T")


def highest(items: list[_T], score: Callable[[_T], float], order: Callable[[_T], int], ties: str,
            tolerance: float) -> _T:
    """The item of the highest score. A score within `tolerance` below the highest is equal to it, and
    of equals `ties` takes the latest (the highest `order`) or the earliest (the reference's `max`, which
    keeps the first of exactly equal floats: tolerance 0 is its comparison)."""
    top = max(score(i) for i in items)
    equal = [i for i in items if score(i) >= top - tolerance]
    return (min if ties == "earliest" else max)(equal, key=order)


def _best(candidates: list[Candidate], context: Context) -> Candidate:
    return highest(candidates, lambda c: c.score, lambda c: c.order, context.ties, context.tolerance)


def _point(chosen: Candidate, candidates: list[Candidate]) -> list[float]:
    return [1.0 if c is chosen else 0.0 for c in candidates]


def _pareto_weights(candidates: list[Candidate], ties: str) -> list[float]:
    """How many rows each candidate leads on, once candidates whose every lead is shared with a kept
    one are dropped (weakest first); `score_child_prop`'s weights when no candidate has rows."""
    best: dict[str, float] = {}
    for c in candidates:
        for row, value in c.rows.items():
            best[row] = max(best.get(row, value), value)
    if not best:
        return _child_weights(candidates)
    fronts = [{i for i, c in enumerate(candidates) if c.rows.get(row, -math.inf) >= top - 1e-9}
              for row, top in best.items()]
    kept = set().union(*fronts)
    preferred_last = -1 if ties == "earliest" else 1  # among equal means, the one `ties` prefers is dropped last
    for i in sorted(kept, key=lambda i: (candidates[i].score, preferred_last * candidates[i].order)):
        if all(len(front & kept) > 1 for front in fronts if i in front):
            kept.discard(i)  # every row it leads on is led by another kept candidate too
    return [float(sum(i in front for front in fronts)) if i in kept else 0.0 for i in range(len(candidates))]


def island_of(candidate: Candidate, islands: int) -> int | None:
    """The island a node lives on: its generation's; None for the initial node, which is on all."""
    return None if candidate.parent is None else candidate.generation % islands


def island_members(candidates: list[Candidate], context: Context) -> list[bool]:
    """Which candidates generation `context.generation` may choose from: those of its island, the
    initial node, and the best of the previous island at each migration before it."""
    k, home = max(context.islands, 1), context.generation % max(context.islands, 1)
    members = [island_of(c, k) in (None, home) for c in candidates]
    every = max(context.migrate_every, 1)
    for moment in range(every, context.generation, every):
        source = [c for c in candidates if c.generation <= moment and island_of(c, k) == (home - 1) % k]
        if source:
            members[candidates.index(_best(source, context))] = True
    return members


def _island_weights(candidates: list[Candidate], context: Context) -> list[float]:
    members = island_members(candidates, context)
    weights = _child_weights(candidates)
    return [w if member else 0.0 for w, member in zip(weights, members)]


def lineage(node_id: str, parent_of: Mapping[str, str | None]) -> set[str]:
    """`node_id` and its ancestors."""
    found: set[str] = set()
    current: str | None = node_id
    while current is not None and current not in found:
        found.add(current)
        current = parent_of.get(current)
    return found


def merge_partner(candidates: list[Candidate], first: str, parent_of: Mapping[str, str | None],
                  ties: str = "latest") -> Candidate | None:
    """The second parent of a merge with `first`: a candidate of another lineage (neither its
    ancestor nor its descendant) such that each is better on rows the other is not, the one
    better than `first` on the most rows (then the higher score); None when no candidate
    complements it, or the candidates carry no rows."""
    chosen = next((c for c in candidates if c.node_id == first), None)
    if chosen is None or not chosen.rows:
        return None
    mine = lineage(first, parent_of)
    found = []
    for c in candidates:
        if c.node_id in mine or first in lineage(c.node_id, parent_of):
            continue
        shared = chosen.rows.keys() & c.rows.keys()
        better = sum(c.rows[r] > chosen.rows[r] for r in shared)
        worse = sum(c.rows[r] < chosen.rows[r] for r in shared)
        if better and worse:
            found.append((better, c))
    if not found:
        return None
    newest_first = -1 if ties == "earliest" else 1
    return max(found, key=lambda t: (t[0], t[1].score, newest_first * t[1].order))[1]


# The probability each candidate has of being chosen, by strategy name (services.config.PARENT_SELECTIONS;
# tests/test_layers.py checks both agree). Weights need not sum to 1; the deterministic ones put all on one.
WEIGHTS: dict[str, Callable[[list[Candidate], Context], list[float]]] = {
    "random": lambda cs, ctx: [1.0] * len(cs),
    "latest": lambda cs, ctx: _point(max(cs, key=lambda c: c.order), cs),
    "best": lambda cs, ctx: _point(_best(cs, ctx), cs),
    "score_prop": lambda cs, ctx: _sigmoid_weights(cs),
    "score_child_prop": lambda cs, ctx: _child_weights(cs),
    "pareto": lambda cs, ctx: _pareto_weights(cs, ctx.ties),
    "islands": _island_weights,
}
STRATEGIES = WEIGHTS  # the names the command line offers
NEEDS_ROWS = frozenset({"pareto"})  # strategies whose candidates must carry their per-row scores


def probabilities(candidates: list[Candidate], strategy: str, context: Context = Context()) -> list[float]:
    """Each candidate's chance of being the next parent under `strategy` (uniform when the weights are all 0,
    as in the reference)."""
    weights = WEIGHTS[strategy](candidates, context)
    total = sum(weights)
    return [w / total for w in weights] if total > 0 else [1.0 / len(candidates)] * len(candidates)


def select_parent(candidates: list[Candidate], strategy: str, rng: random.Random,
                  context: Context = Context()) -> Candidate:
    if not candidates:
        raise ValueError("no node can be a parent: none has a score on every domain")
    if strategy == "random":
        return rng.choice(candidates)  # drawn as before weights existed, so seeded runs replay the same
    weights = probabilities(candidates, strategy, context)
    if strategy in ("best", "latest"):
        return candidates[weights.index(max(weights))]
    return rng.choices(candidates, weights=weights)[0]
