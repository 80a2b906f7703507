"""Parent selection: which archive node the next generation starts from.

A strategy is an object with `weights` (each candidate's weight; they need not sum to 1) and `choose` (the
candidate drawn with a `random.Random` the loop seeds, so a seeded run replays), and `needs_rows` (whether
its candidates must carry their per-row scores, which costs a read of every full evaluation). `Weighted`
draws in proportion to the weights; `Pointed` takes the one candidate its `pick` names. A bundled strategy
is a file of this folder whose `STRATEGY` is an instance; a plug-in names its class or instance under the
entry point group `hyperagents_imo.parent_selection` (docs/search.md). `--parent_selection NAME`
and `loop.parent_selection` choose one.

Which scores the candidates carry (staged-only and initial nodes) is archive.store's `ScoreRule`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

from services.choices import Ties

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


class Recorded(Protocol):
    """What making a candidate reads of a recorded node (archive.records.Node has it)."""

    @property
    def node_id(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def valid_parent(self) -> bool: ...


_N = TypeVar("_N", bound=Recorded)


def candidates_among(nodes: Sequence[_N], children: Mapping[str | None, int], score: Callable[[_N], float | None],
                     rows: Callable[[_N], Mapping[str, float]] | None = None,
                     barred: Collection[str] = ()) -> list[Candidate]:
    """The candidates among `nodes` (in the order they were recorded): each valid parent that is not `barred`
    and has a `score`, with its count of `children`, its place in that order and, when `rows` is given, its
    per-row scores. archive.store's Archive.candidates and bench/search_strategies.py both make them here."""
    found = []
    for order, node in enumerate(nodes):
        value = score(node) if node.valid_parent and node.node_id not in barred else None
        if value is not None:
            found.append(Candidate(node.node_id, value, children.get(node.node_id, 0), order, node.generation,
                                   node.parent, rows(node) if rows else {}))
    return found


@dataclass(frozen=True)
class Context:
    """What a strategy may read besides the candidates: who is choosing and how equal scores are told apart (a
    strategy's own settings are its own: search/registry.py's `configured`)."""

    generation: int = 0  # the generation whose parent is chosen
    ties: str = "latest"  # latest | earliest: which of equal candidates is preferred
    tolerance: float = TIE_TOLERANCE  # scores within this of each other are equal (0: the reference's float `max`)


@runtime_checkable
class ParentSelection(Protocol):
    needs_rows: bool

    def weights(self, candidates: list[Candidate], context: Context) -> list[float]: ...

    def choose(self, candidates: list[Candidate], rng: random.Random, context: Context) -> Candidate: ...


def probabilities(strategy: ParentSelection, candidates: list[Candidate], context: Context) -> list[float]:
    """Each candidate's chance under `strategy`'s weights (uniform when they are all 0, as in the reference)."""
    weights = strategy.weights(candidates, context)
    total = sum(weights)
    return [w / total for w in weights] if total > 0 else [1.0 / len(candidates)] * len(candidates)


class Weighted:
    """A strategy that draws each candidate in proportion to its weight."""

    needs_rows = False

    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        raise NotImplementedError

    def choose(self, candidates: list[Candidate], rng: random.Random, context: Context) -> Candidate:
        return rng.choices(candidates, weights=probabilities(self, candidates, context))[0]


class Pointed(Weighted):
    """A strategy that takes one candidate, the one `pick` names: all its weight on that one."""

    def pick(self, candidates: list[Candidate], context: Context) -> Candidate:
        raise NotImplementedError

    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        chosen = self.pick(candidates, context)
        return [1.0 if c is chosen else 0.0 for c in candidates]

    def choose(self, candidates: list[Candidate], rng: random.Random, context: Context) -> Candidate:
        return self.pick(candidates, context)


_T = TypeVar("_T")


def highest(items: list[_T], score: Callable[[_T], float], order: Callable[[_T], int], ties: str,
            tolerance: float) -> _T:
    """The item of the highest score. A score within `tolerance` below the highest is equal to it, and
    of equals `ties` takes the latest (the highest `order`) or the earliest (the reference's `max`, which
    keeps the first of exactly equal floats: tolerance 0 is its comparison)."""
    top = max(score(i) for i in items)
    equal = [i for i in items if score(i) >= top - tolerance]
    return (min if ties == Ties.EARLIEST else max)(equal, key=order)


def best_of(candidates: list[Candidate], context: Context) -> Candidate:
    """The candidate of the highest score, equal ones decided by `context.ties`."""
    return highest(candidates, lambda c: c.score, lambda c: c.order, context.ties, context.tolerance)


def sigmoid_weights(candidates: list[Candidate]) -> list[float]:
    """The reference's score_prop weights: sigmoid(10 (score - mid)), mid the mean of the top-3 scores."""
    top3 = sorted((c.score for c in candidates), reverse=True)[:3]
    mid = sum(top3) / len(top3)
    return [1.0 / (1.0 + math.exp(-10.0 * (c.score - mid))) for c in candidates]


def child_weights(candidates: list[Candidate]) -> list[float]:
    """The reference's score_child_prop weights: sigmoid_weights times exp(-(children / 8)^3)."""
    return [w * math.exp(-((c.children / 8.0) ** 3)) for w, c in zip(sigmoid_weights(candidates), candidates)]
