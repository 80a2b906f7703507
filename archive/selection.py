"""Parent selection: which archive node the next generation starts from.

Pure functions over `Candidate`s, registered by name, with the weights of the HyperAgents
reference (utils/gl_utils.py, select_parent):

- `score_prop`: weight sigmoid(10 (s - mid)), mid = mean of the top-3 scores;
- `score_child_prop` (default): that times exp(-(children / 8)^3), so a node that has
  already been expanded many times gives way to others;
- `best` (equal scores: the latest node, or with ties="earliest" the earliest, as the
  reference's `max` over the archive in order), `latest`, `random`.

Which scores the candidates carry (staged-only and initial nodes) is archive.store's
`ScoreRule`. The randomness comes from the caller's `random.Random`, so a seeded run replays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


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


def _child_weights(candidates: list[Candidate]) -> list[float]:
    return [w * math.exp(-((c.children / 8.0) ** 3)) for w, c in zip(_sigmoid_weights(candidates), candidates)]


def _best(candidates: list[Candidate], ties: str) -> Candidate:
    """The highest score; among equals the latest, or the earliest (the reference: `max` keeps the first)."""
    newest_first = -1 if ties == "earliest" else 1
    return max(candidates, key=lambda c: (c.score, newest_first * c.order))


def _point(chosen: Candidate, candidates: list[Candidate]) -> list[float]:
    return [1.0 if c is chosen else 0.0 for c in candidates]


# The probability each candidate has of being chosen, by strategy name (services.config.PARENT_SELECTIONS;
# tests/test_layers.py checks both agree). Weights need not sum to 1; the deterministic ones put all on one.
WEIGHTS: dict[str, Callable[[list[Candidate], str], list[float]]] = {
    "random": lambda cs, ties: [1.0] * len(cs),
    "latest": lambda cs, ties: _point(max(cs, key=lambda c: c.order), cs),
    "best": lambda cs, ties: _point(_best(cs, ties), cs),
    "score_prop": lambda cs, ties: _sigmoid_weights(cs),
    "score_child_prop": lambda cs, ties: _child_weights(cs),
}
STRATEGIES = WEIGHTS  # the names the command line offers


def probabilities(candidates: list[Candidate], strategy: str, ties: str = "latest") -> list[float]:
    """Each candidate's chance of being the next parent under `strategy` (uniform when the weights are all 0,
    as in the reference)."""
    weights = WEIGHTS[strategy](candidates, ties)
    total = sum(weights)
    return [w / total for w in weights] if total > 0 else [1.0 / len(candidates)] * len(candidates)


def select_parent(candidates: list[Candidate], strategy: str, rng: random.Random,
                  ties: str = "latest") -> Candidate:
    if not candidates:
        raise ValueError("no node can be a parent: none has a score on every domain")
    if strategy == "random":
        return rng.choice(candidates)  # drawn as before weights existed, so seeded runs replay the same
    weights = probabilities(candidates, strategy, ties)
    if strategy in ("best", "latest"):
        return candidates[weights.index(max(weights))]
    return rng.choices(candidates, weights=weights)[0]
