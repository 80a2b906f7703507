"""islands: the archive as sub-archives (`search.islands.islands` of them). Generation g draws its parent from
island g mod K with score_child_prop's weights, and its child lives there; the initial node is on every island.
Every `search.islands.migrate_every` generations each island's best node joins the next island (a ring), so good
changes spread without one lineage taking over every island. Which island a node is on follows from its
generation, so a resumed run needs no state of its own."""

from __future__ import annotations

from dataclasses import dataclass

from search.parent_selection import Candidate, Context, Weighted, best_of, child_weights


@dataclass(frozen=True)
class Settings:
    islands: int = 4  # how many sub-archives (generation g draws from island g mod islands), from 1 to 64
    migrate_every: int = 10  # every this many generations each island's best node joins the next island

    def __post_init__(self) -> None:
        if not 1 <= self.islands <= 64:
            raise ValueError(f"islands must be from 1 to 64, got {self.islands}")
        if not 1 <= self.migrate_every <= 10**6:
            raise ValueError(f"migrate_every must be from 1 to 1000000, got {self.migrate_every}")


DEFAULT = Settings()


def island_of(candidate: Candidate, islands: int) -> int | None:
    """The island a node lives on: its generation's; None for the initial node, which is on all."""
    return None if candidate.parent is None else candidate.generation % islands


def island_members(candidates: list[Candidate], context: Context, settings: Settings = DEFAULT) -> list[bool]:
    """Which candidates generation `context.generation` may choose from: those of its island, the
    initial node, and the best of the previous island at each migration before it."""
    k, home = settings.islands, context.generation % settings.islands
    members = [island_of(c, k) in (None, home) for c in candidates]
    every = settings.migrate_every
    for moment in range(every, context.generation, every):
        source = [c for c in candidates if c.generation <= moment and island_of(c, k) == (home - 1) % k]
        if source:
            members[candidates.index(best_of(source, context))] = True
    return members


class Islands(Weighted):
    Settings = Settings

    def __init__(self, settings: Settings = DEFAULT) -> None:
        self.settings = settings

    def configured(self, settings: Settings) -> Islands:
        return Islands(settings)

    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        members = island_members(candidates, context, self.settings)
        return [w if member else 0.0 for w, member in zip(child_weights(candidates), members)]


STRATEGY = Islands()
