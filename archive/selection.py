"""Parent selection: which archive node the next generation starts from.

Pure functions over `Candidate`s, registered by name, as in the HyperAgents reference:

- `score_prop`: weight sigmoid(10 (s - mid)), mid = mean of the top-3 scores;
- `score_child_prop` (default): that times exp(-(children / 8)^3), so a node that has
  already been expanded many times gives way to others;
- `best`, `latest`, `random`.

The randomness comes from the caller's `random.Random`, so a seeded run replays.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Candidate:
    node_id: str
    score: float  # mean over domains of the selection score (see archive.store.selection_score)
    children: int  # nodes already made from this one
    order: int  # creation order: higher is newer


def _sigmoid_weights(candidates: list[Candidate]) -> list[float]:
    top3 = sorted((c.score for c in candidates), reverse=True)[:3]
    mid = sum(top3) / len(top3)
    return [1.0 / (1.0 + math.exp(-10.0 * (c.score - mid))) for c in candidates]


def score_prop(candidates: list[Candidate], rng: random.Random) -> Candidate:
    return rng.choices(candidates, weights=_sigmoid_weights(candidates))[0]


def score_child_prop(candidates: list[Candidate], rng: random.Random) -> Candidate:
    weights = [w * math.exp(-((c.children / 8.0) ** 3)) for w, c in zip(_sigmoid_weights(candidates), candidates)]
    return rng.choices(candidates, weights=weights)[0]


def best(candidates: list[Candidate], rng: random.Random) -> Candidate:
    return max(candidates, key=lambda c: (c.score, c.order))


def latest(candidates: list[Candidate], rng: random.Random) -> Candidate:
    return max(candidates, key=lambda c: c.order)


def uniform(candidates: list[Candidate], rng: random.Random) -> Candidate:
    return rng.choice(candidates)


# By the names the config accepts (services.config.PARENT_SELECTIONS; tests/test_layers.py checks both agree).
STRATEGIES: dict[str, Callable[[list[Candidate], random.Random], Candidate]] = {
    "random": uniform,
    "latest": latest,
    "best": best,
    "score_prop": score_prop,
    "score_child_prop": score_child_prop,
}


def select_parent(candidates: list[Candidate], strategy: str, rng: random.Random) -> Candidate:
    if not candidates:
        raise ValueError("no node can be a parent: none has a score on every domain")
    return STRATEGIES[strategy](candidates, rng)
