"""tournament: draw `size` nodes at random (with replacement) and take the one of the highest score.

Tournament selection is the classic of genetic algorithms: it leans towards good nodes as score_prop does,
yet it reads only the order of the scores, never their distance, so one node far ahead does not take every
generation, and the pressure is set by one number (size 1 is `random`; a large size nears `best`).

The loop asks a strategy for its `weights` (shown in the run's log and on the dashboard) and then for its
`choose`. `Weighted` draws in proportion to the weights, so writing the tournament's chance of each node as
its weight is the whole strategy: with the n candidates ranked from the lowest score, the node of rank i
wins when every one of the `size` draws falls at or below i and not every one below, (i/n)^size -
((i-1)/n)^size. Nodes of equal scores (within `context.tolerance`) share their ranks' chance equally.

Its one setting, the tournament's size, is set in the run's config like a bundled strategy's:
`search: {tournament: {size: 3}}` (or `--set search.tournament={size: 3}`). The loop makes the strategy with it
through `Settings` and `configured`, and refuses a bad value in one line before the run starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from search.parent_selection import Candidate, Context, Weighted


@dataclass(frozen=True)
class Settings:
    size: int = 2  # nodes drawn for each tournament: 1 is random, more leans harder towards the best

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a tournament draws at least one node, not {self.size}")


class Tournament(Weighted):
    needs_rows = False  # reads each candidate's mean score only, not its per-row scores
    Settings = Settings

    def __init__(self, size: int = 2) -> None:
        self.size = Settings(size).size

    def configured(self, settings: Settings) -> Tournament:
        return Tournament(settings.size)

    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        n, chance = len(candidates), [0.0] * len(candidates)
        ranked = sorted(range(n), key=lambda i: candidates[i].score)
        start = 0
        while start < n:  # one group of equal scores at a time, from the lowest
            end = start + 1
            while end < n and candidates[ranked[end]].score - candidates[ranked[start]].score <= context.tolerance:
                end += 1
            share = ((end / n) ** self.size - (start / n) ** self.size) / (end - start)
            for i in ranked[start:end]:
                chance[i] = share
            start = end
        return chance
