"""Meta model choice (`loop.meta_bandit`, with `models.meta` a list): which model's meta agent makes the next
child, a bandit over the models as ShinkaEvolve picks its mutating model, rewarded by what each child gained over
its parent per dollar it cost.

A pull is one finished generation: its meta model, the gain of its child's selection score over its parent's (0
when the child could not be scored, or did worse), and what the generation cost (meta agent and evaluation). The
pulls are read from the run's own records (each node keeps its meta model), so the state is the run's and a
resumed run continues it; with a seed, the draw replays (the caller's generator). A model not yet tried goes first
(in the order given) whatever the strategy; then the strategy's `choose(models, pulls, rng)` picks.

A bundled strategy is a file of this folder whose `STRATEGY` is an instance; a plug-in names its class or instance
under the entry point group `hyperagents_imo.meta_model_choice`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

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


class Generation(Protocol):
    """What the bandit reads of a recorded node (archive.records.Node has it)."""

    @property
    def parent(self) -> str | None: ...
    @property
    def generation(self) -> int: ...
    @property
    def meta_model(self) -> str | None: ...
    @property
    def valid_parent(self) -> bool: ...
    @property
    def cost_usd(self) -> Mapping[str, float]: ...


@runtime_checkable
class MetaModelChoice(Protocol):
    def choose(self, models: Sequence[str], pulls: Sequence[Pull], rng: random.Random) -> str:
        """The next generation's meta model among `models`, every one of which has been pulled at least once."""
        ...


G = TypeVar("G", bound=Generation)


def pulls_of(nodes: Mapping[str, G], score: Callable[[G], float | None], upto: int | None = None) -> list[Pull]:
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


def choose(models: Sequence[str], pulls: Sequence[Pull], strategy: MetaModelChoice, rng: random.Random) -> str:
    """The meta model of the next generation: the one model, a model not yet tried, or the strategy's pick."""
    if len(models) == 1:
        return models[0]
    untried = [a.model for a in arms(models, pulls) if a.pulls == 0]
    return untried[0] if untried else strategy.choose(models, pulls, rng)
