"""Novelty measures (`loop.novelty_measure`, used when `loop.novelty_threshold` is set): how alike two changes
are, from 0 (nothing in common) to 1 (the same change), so that a child whose change nearly repeats an earlier
node's is recorded `duplicate` and costs no evaluation (archive/novelty.py reads the changes, a diff's changed
lines, and compares a child with the earlier nodes within a deadline).

A measure has `prepare` (a change's changed lines, a list, as the measure compares them, which is no
list; kept per node, so each earlier node is prepared once a run), `similarity` of two prepared changes and
`could_reach` (False when two prepared changes cannot be `threshold` alike, a cheap test before
`similarity`; `Measure` says True). A bundled measure is a file of this folder whose `STRATEGY` is an
instance; a plug-in names its class or instance under the entry point group `hyperagents_imo.novelty`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

MAX_LINES = 2000  # changed lines of a change compared at most (its first ones)


@runtime_checkable
class NoveltyMeasure(Protocol):
    def prepare(self, lines: Sequence[str]) -> object: ...

    def similarity(self, a: object, b: object) -> float: ...

    def could_reach(self, a: object, b: object, threshold: float) -> bool: ...


class Measure:
    """A measure without a cheap bound: every pair is compared."""

    def prepare(self, lines: Sequence[str]) -> object:
        return tuple(lines[:MAX_LINES])

    def similarity(self, a: object, b: object) -> float:
        raise NotImplementedError

    def could_reach(self, a: object, b: object, threshold: float) -> bool:
        return True
