"""Novelty screening (issue 30, `loop.novelty_threshold`): a child whose change is a near-duplicate
of a change the archive already holds is recorded `duplicate` and costs no evaluation.

A change is compared by its diff's changed lines (`+`/`-`, file headers and hunk positions left
out, runs of whitespace as one space), so the same edit made at another line, or re-indented,
still matches. Similarity is difflib's ratio over those lines in order: 1.0 for the same edit,
0.0 for nothing in common. ShinkaEvolve rejects near-duplicates the same way before paying for
them; here the threshold is the user's (off by default, the paper's loop has no such check).

Patches are the core's own nodes/<id>/patch.diff, read bounded; what an agent wrote in them is
only compared, never run or shown here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher
from pathlib import Path

from services.fsutil import read_below

MAX_PATCH_BYTES = 256 * 1024  # of a patch.diff compared: a change larger than this is compared by its start
MAX_LINES = 2000  # changed lines compared at most (difflib is quadratic in the worst case)


def changed_lines(patch: str) -> list[str]:
    """The lines a diff adds or removes, normalized: sign kept, whitespace runs as one space."""
    found = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        body = " ".join(line[1:].split())
        if body:
            found.append(line[0] + body)
        if len(found) >= MAX_LINES:
            break
    return found


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """How alike two changes are, from 0 (nothing shared) to 1 (the same lines in the same order)."""
    if not a and not b:
        return 1.0
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    return matcher.ratio()


def nearest(change: Sequence[str], others: Iterable[tuple[str, Sequence[str]]],
            threshold: float) -> tuple[str, float] | None:
    """The first of `others` (node id, its changed lines) at least `threshold` alike to `change`,
    with its similarity; None when none is. The cheap upper bounds are tried before the ratio."""
    if not change:
        return None
    for node_id, lines in others:
        if not lines:
            continue
        matcher = SequenceMatcher(None, change, lines, autojunk=False)
        if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
            continue
        if (found := matcher.ratio()) >= threshold:
            return node_id, found
    return None


def node_change(nodes_dir: Path, node_id: str) -> list[str]:
    """The changed lines of nodes/<node_id>/patch.diff (none when the node has no patch)."""
    try:
        data, _ = read_below(nodes_dir, f"{node_id}/patch.diff", MAX_PATCH_BYTES)
    except (OSError, ValueError):  # none (the initial node, no change), or not a regular file
        return []
    return changed_lines(data.decode("utf-8", "replace"))
