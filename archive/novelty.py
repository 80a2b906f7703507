"""Novelty screening (issue 30, `loop.novelty_threshold`): a child whose change is a near-duplicate
of a change the archive already holds is recorded `duplicate` and costs no evaluation.

A change is compared by its diff's changed lines (`+`/`-`, file headers and hunk positions left
out, runs of whitespace as one space), so the same edit made at another line, or re-indented,
still matches; how alike two changes are is the run's novelty measure's (`loop.novelty_measure`:
search/novelty/, by default `dice`). The threshold is the user's (off by default, the paper's loop
has no such check).

Patches are the core's own nodes/<id>/patch.diff, read bounded; what an agent wrote in them is
only compared, never run or shown here. A comparison that runs past its deadline raises
`archive.text_pass.TooLarge`, and the loop records the node as not screened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from archive.text_pass import SCREEN_SECONDS, TooLarge
from search.novelty import MAX_LINES, NoveltyMeasure
from search.novelty.dice import STRATEGY as DICE
from search.novelty.dice import Change, similarity
from services.fsutil import read_below

MAX_PATCH_BYTES = 256 * 1024  # of a patch.diff compared: a change larger than this is compared by its start

__all__ = ["MAX_LINES", "MAX_PATCH_BYTES", "Change", "changed_lines", "first_duplicate", "nearest", "node_change",
           "similarity"]


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


def nearest(change: Sequence[str] | object, others: Iterable[tuple[str, object]], threshold: float,
            measure: NoveltyMeasure = DICE, seconds: float = SCREEN_SECONDS) -> tuple[str, float] | None:
    """The first of `others` (node id, its change as `measure` prepared it, or a list of its changed lines) at
    least `threshold` alike to `change` (the same) under `measure`, with its similarity; None when none is (or
    `change` changes nothing). TooLarge once `seconds` have passed."""
    mine = measure.prepare(change) if isinstance(change, list) else change
    if not mine:
        return None
    deadline = time.monotonic() + seconds
    for compared, (node_id, theirs) in enumerate(others):
        if time.monotonic() > deadline:
            raise TooLarge(f"novelty: compared with {compared} earlier nodes before its deadline")
        other = measure.prepare(theirs) if isinstance(theirs, list) else theirs
        if not other or not measure.could_reach(mine, other, threshold):
            continue
        if (found := measure.similarity(mine, other)) >= threshold:
            return node_id, found
    return None


def node_change(nodes_dir: Path, node_id: str) -> list[str]:
    """The changed lines of nodes/<node_id>/patch.diff (none when the node has no patch)."""
    try:
        data, _ = read_below(nodes_dir, f"{node_id}/patch.diff", MAX_PATCH_BYTES)
    except (OSError, ValueError):  # none (the initial node, no change), or not a regular file
        return []
    return changed_lines(data.decode("utf-8", "replace"))


def first_duplicate(nodes_dir: Path, node_id: str, earlier: list[str], prepared: dict[str, object],
                    threshold: float, measure: NoveltyMeasure) -> tuple[str, float] | None:
    """The first of the `earlier` nodes whose change is at least `threshold` alike to node `node_id`'s under
    `measure`, with its similarity, or None (`nearest`); `prepared` keeps each node's change as `measure`
    prepared it, filled as needed, so a run prepares each node once."""
    for other in earlier:
        if other not in prepared:
            prepared[other] = measure.prepare(node_change(nodes_dir, other))
    return nearest(node_change(nodes_dir, node_id), ((n, prepared[n]) for n in earlier), threshold, measure)
