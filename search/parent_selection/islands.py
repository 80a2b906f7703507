"""islands: the archive as `loop.islands` sub-archives. Generation g draws its parent from island g mod K with
score_child_prop's weights, and its child lives there; the initial node is on every island. Every
`loop.migrate_every` generations each island's best node joins the next island (a ring), so good changes
spread without one lineage taking over every island. Which island a node is on follows from its
generation, so a resumed run needs no state of its own."""

from __future__ import annotations

from search.parent_selection import Candidate, Context, Weighted, best_of, child_weights


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
            members[candidates.index(best_of(source, context))] = True
    return members


class Islands(Weighted):
    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        members = island_members(candidates, context)
        return [w if member else 0.0 for w, member in zip(child_weights(candidates), members)]


STRATEGY = Islands()
