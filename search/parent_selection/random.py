"""random: every candidate alike (the reference's `random`)."""

from __future__ import annotations

import random

from search.parent_selection import Candidate, Context, Weighted


class Uniform(Weighted):
    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        return [1.0] * len(candidates)

    def choose(self, candidates: list[Candidate], rng: random.Random, context: Context) -> Candidate:
        return rng.choice(candidates)  # drawn as before weights existed, so seeded runs replay the same


STRATEGY = Uniform()
