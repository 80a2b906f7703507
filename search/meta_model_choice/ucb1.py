"""ucb1: the highest mean reward plus sqrt(2 ln N / n) (Auer et al., 2002), each model's rewards scaled into [0, 1]
by the largest single reward seen so far; N is every pull, n the model's. The default."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from search.meta_model_choice import Pull, arms


class UCB1:
    def choose(self, models: Sequence[str], pulls: Sequence[Pull], rng: random.Random) -> str:
        stats = arms(models, pulls)
        top = max((p.reward for p in pulls), default=0.0)
        total = sum(a.pulls for a in stats)
        bounds = [(a.mean_reward / top if top > 0 else 0.0) + math.sqrt(2 * math.log(total) / a.pulls)
                  for a in stats]
        return stats[bounds.index(max(bounds))].model


STRATEGY = UCB1()
