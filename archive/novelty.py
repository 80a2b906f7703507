"""Novelty screening (issue 30, `loop.novelty_threshold`): a child whose change is a near-duplicate
of a change the archive already holds is recorded `duplicate` and costs no evaluation.

A change is compared by its diff's changed lines (`+`/`-`, file headers and hunk positions left
out, runs of whitespace as one space), so the same edit made at another line, or re-indented,
still matches. Similarity is the Dice coefficient of the two changes' lines taken as multisets:
twice the lines they share (a line twice in both counts twice) over the lines of both. It is 1.0
for the same edit, 0.0 for nothing in common, and it does not see order: the same lines in another
order are the same change. It is difflib's `quick_ratio`, an upper bound of the `ratio` this module
used before, so a threshold catches at least what it caught; unlike `ratio` (cubic in the worst
case: two changes of the same lines in another order took 40-55 s a pair), it costs time linear
in the lines, and a node is compared with 200 earlier ones in milliseconds (bench/host_screening.py).
ShinkaEvolve rejects near-duplicates the same way before paying for them; here the threshold is
the user's (off by default, the paper's loop has no such check).

Patches are the core's own nodes/<id>/patch.diff, read bounded; what an agent wrote in them is
only compared, never run or shown here. A comparison that runs past its deadline raises
`archive.text_pass.TooLarge`, and the loop records the node as not screened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from archive.text_pass import SCREEN_SECONDS, TooLarge
from services.fsutil import read_below

MAX_PATCH_BYTES = 256 * 1024  # of a patch.diff compared: a change larger than this is compared by its start
MAX_LINES = 2000  # changed lines compared at most, also by its start


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


def changed_lines(patch: str) -> list[str]:
    """The lines a diff adds or removes, normalized: sign kept, whitespace runs as one space."""
    found = []
    for line in patch[:MAX_PATCH_BYTES].splitlines():
        if line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        body = " ".join(line[1:].split())
        if body:
            found.append(line[0] + body)
        if len(found) >= MAX_LINES:
            break
    return found


def _change(lines: Sequence[str] | Change) -> Change:
    return lines if isinstance(lines, Change) else Change.of(lines)


def similarity(a: Sequence[str] | Change, b: Sequence[str] | Change) -> float:
    """How alike two changes are, from 0 (no line shared) to 1 (the same lines, in any order)."""
    a, b = _change(a), _change(b)
    if not a and not b:
        return 1.0
    return 2 * len(a.lines & b.lines) / (len(a) + len(b))


def nearest(change: Sequence[str] | Change, others: Iterable[tuple[str, Sequence[str] | Change]],
            threshold: float, seconds: float = SCREEN_SECONDS) -> tuple[str, float] | None:
    """The first of `others` (node id, its changed lines or Change) at least `threshold` alike to
    `change`, with its similarity; None when none is. TooLarge once `seconds` have passed."""
    mine = _change(change)
    if not mine:
        return None
    deadline = time.monotonic() + seconds
    for compared, (node_id, lines) in enumerate(others):
        if time.monotonic() > deadline:
            raise TooLarge(f"novelty: compared with {compared} earlier nodes before its deadline")
        other = _change(lines)
        if not other or 2 * min(len(mine), len(other)) < threshold * (len(mine) + len(other)):
            continue  # the sizes alone keep it under the threshold
        if (found := similarity(mine, other)) >= threshold:
            return node_id, found
    return None


def node_change(nodes_dir: Path, node_id: str) -> list[str]:
    """The changed lines of nodes/<node_id>/patch.diff (none when the node has no patch)."""
    try:
        data, _ = read_below(nodes_dir, f"{node_id}/patch.diff", MAX_PATCH_BYTES)
    except (OSError, ValueError):  # none (the initial node, no change), or not a regular file
        return []
    return changed_lines(data.decode("utf-8", "replace"))
