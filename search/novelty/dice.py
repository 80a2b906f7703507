"""dice (the default): the Dice coefficient of the two changes' lines taken as multisets, twice the lines they
share (a line twice in both counts twice) over the lines of both. It is 1.0 for the same edit, 0.0 for nothing
in common, and it does not see order: the same lines in another order are the same change. It is difflib's
`quick_ratio`, an upper bound of its `ratio`, which an earlier version used (cubic in the worst case: two
changes of the same lines in another order took 40-55 s a pair); it costs time linear in the lines, and a node
is compared with 200 earlier ones in milliseconds (bench/host_screening.py). ShinkaEvolve rejects
near-duplicates the same way before paying for them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from search.novelty import MAX_LINES, Measure


@dataclass(frozen=True)
class Change:
    """A change's lines as a set: each line with how many times it came before (a multiset as a set,
    so that sharing is one set intersection)."""

    lines: frozenset[tuple[str, int]]

    @classmethod
    def of(cls, lines: Sequence[str]) -> Change:
        seen: dict[str, int] = {}
        counted = []
        for line in lines[:MAX_LINES]:
            seen[line] = seen.get(line, 0) + 1
            counted.append((line, seen[line]))
        return cls(frozenset(counted))

    def __len__(self) -> int:
        return len(self.lines)


def as_change(lines: Sequence[str] | Change) -> Change:
    return lines if isinstance(lines, Change) else Change.of(lines)


def similarity(a: Sequence[str] | Change, b: Sequence[str] | Change) -> float:
    """How alike two changes are, from 0 (no line shared) to 1 (the same lines, in any order)."""
    a, b = as_change(a), as_change(b)
    if not a and not b:
        return 1.0
    return 2 * len(a.lines & b.lines) / (len(a) + len(b))


class Dice(Measure):
    def prepare(self, lines: Sequence[str]) -> Change:
        return as_change(lines)

    def similarity(self, a: object, b: object) -> float:
        return similarity(as_change(a), as_change(b))  # type: ignore[arg-type]

    def could_reach(self, a: object, b: object, threshold: float) -> bool:
        """The sizes alone may keep two changes under the threshold: at most the smaller one is shared."""
        a, b = as_change(a), as_change(b)  # type: ignore[arg-type]
        return 2 * min(len(a), len(b)) >= threshold * (len(a) + len(b))


STRATEGY = Dice()
