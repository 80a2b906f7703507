"""Which meta model makes the next child (issue 30, `models.meta` as a list): a bandit over the
models, as ShinkaEvolve picks its mutating model, rewarded by what each child gained over its
parent per dollar it cost.

A pull is one finished generation: its meta model, the gain of its child's selection score over
its parent's (0 when the child could not be scored, or did worse), and what the generation cost
(meta agent and evaluation). The rules:

- `ucb1`: a model not yet tried first (in the order given); then the highest mean reward plus
  sqrt(2 ln N / n) (Auer et al., 2002), rewards scaled into [0, 1] by the largest seen so far;
- `thompson`: each model's chance of improving on its parent drawn from Beta(1 + improved,
  1 + not improved), divided by its mean cost per generation; the highest draw wins.

The pulls are read from the run's own records (each node keeps its meta model), so the state is
the run's and a resumed run continues it; with a seed, the draw replays (the caller's generator).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from archive.records import Node
from services.choices import MetaBandit

RULES = tuple(MetaBandit)
MIN_COST_USD = 1e-6  # a free generation (a local model) still counts as a small cost, not a division by 0


@dataclass(frozen=True)
class Pull:
    model: str
    gain: float  # the child's selection score minus its parent's, 0 when it did not improve or was not scored
    cost_usd: float  # what the generation cost: its meta agent and its child's evaluation

    @property
    def reward(self) -> float:
        return max(self.gain, 0.0) / max(self.cost_usd, MIN_COST_USD)


@dataclass(frozen=True)
class Arm:
    """One model's record so far, as the plan and the dashboard show it."""

    model: str
    pulls: int
    improved: int  # children that scored above their parent
    mean_reward: float  # gain per dollar
    cost_usd: float  # all its generations together


def pulls_of(nodes: Mapping[str, Node], score: Callable[[Node], float | None], upto: int | None = None) -> list[Pull]:
    """Each finished generation of a run (`nodes` by id) as the bandit counts it: its meta model, its
    child's gain in `score` over its parent (0 when the child is not a valid node), what it cost; only
    generations up to `upto` (all when None)."""
    pulls = []
    for node in nodes.values():
        parent = nodes.get(node.parent or "")
        if node.meta_model is None or parent is None or (upto is not None and node.generation > upto):
            continue
        gain = (score(node) or 0.0) - (score(parent) or 0.0) if node.valid_parent else 0.0
        pulls.append(Pull(node.meta_model, gain, sum(node.cost_usd.values())))
    return pulls


def arms(models: Sequence[str], pulls: Sequence[Pull]) -> list[Arm]:
    found = []
    for model in models:
        mine = [p for p in pulls if p.model == model]
        found.append(Arm(model, len(mine), sum(p.gain > 0 for p in mine),
                         sum(p.reward for p in mine) / len(mine) if mine else 0.0, sum(p.cost_usd for p in mine)))
    return found


def choose(models: Sequence[str], pulls: Sequence[Pull], rule: str, rng: random.Random) -> str:
    """The meta model of the next generation."""
    if len(models) == 1:
        return models[0]
    stats = arms(models, pulls)
    untried = [a.model for a in stats if a.pulls == 0]
    if untried:
        return untried[0]
    if rule == MetaBandit.THOMPSON:
        draws = [rng.betavariate(1 + a.improved, 1 + a.pulls - a.improved) / max(a.cost_usd / a.pulls, MIN_COST_USD)
                 for a in stats]
        return stats[draws.index(max(draws))].model
    top = max((p.reward for p in pulls), default=0.0)
    total = sum(a.pulls for a in stats)
    bounds = [(a.mean_reward / top if top > 0 else 0.0) + math.sqrt(2 * math.log(total) / a.pulls) for a in stats]
    return stats[bounds.index(max(bounds))].model
