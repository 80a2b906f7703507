"""thompson: each model's chance of improving on its parent drawn from Beta(1 + improved, 1 + not improved),
divided by its mean cost per generation; the highest draw wins."""

from __future__ import annotations

import random
from collections.abc import Sequence

from search.meta_model_choice import MIN_COST_USD, Pull, arms


class Thompson:
    def choose(self, models: Sequence[str], pulls: Sequence[Pull], rng: random.Random) -> str:
        stats = arms(models, pulls)
        draws = [rng.betavariate(1 + a.improved, 1 + a.pulls - a.improved) / max(a.cost_usd / a.pulls, MIN_COST_USD)
                 for a in stats]
        return stats[draws.index(max(draws))].model


STRATEGY = Thompson()
