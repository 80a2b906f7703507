"""What the host checks of a child's change before paying for its evaluation: tamper flags (its change or its
meta agent's commands reaching for the scoring side, archive/tamper.py; flagged, never acted on) and novelty
(a change that nearly repeats an earlier node's is not evaluated, under loop.novelty_threshold).

Both read what the sandbox wrote and the patch the core made from it as bounded text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from archive.novelty import first_duplicate
from archive.records import Node
from archive.store import META_TRANSCRIPT, Archive, untrusted_dir
from archive.tamper import NOT_SCREENED, read_text
from archive.tamper import flags as tamper_flags
from archive.text_pass import TooLarge
from optimizer.slots import horizon
from search.registry import novelty_measure

if TYPE_CHECKING:
    from optimizer.context import RunContext


class Screen:
    def __init__(self, ctx: RunContext, archive: Archive) -> None:
        self.ctx, self.archive = ctx, archive
        self._changes: dict[str, object] = {}  # node id -> its patch's changed lines, as compared

    def tamper_flags(self, node_id: str, patch: dict) -> list[str]:
        """Why the node's change or its meta agent's commands reach for the scoring side (archive/tamper.py)."""
        ctx, unread = self.ctx, []  # unread: what was too large to read whole: the node says it was not screened
        hidden = list(dict.fromkeys(c for d in ctx.domains for c in d.hidden_columns))
        transcript = read_text(untrusted_dir(ctx.run_dir, node_id, "meta"), META_TRANSCRIPT, "its meta transcript",
                               unread)
        return tamper_flags(read_text(ctx.run_dir / "nodes", f"{node_id}/patch.diff", "its change", unread),
                            [str(f) for f in patch.get("dropped") or []], hidden, transcript, unread)

    def duplicate_of(self, node: Node) -> str | None:
        """Why `node` is not worth evaluating under loop.novelty_threshold (its change nearly repeats an
        earlier node's), or None. It is compared with the nodes its generation could choose a parent
        from, so a replayed run screens the same; a comparison past its deadline is a flag instead."""
        loop = self.ctx.loop
        if loop.novelty_threshold is None:
            return None
        upto = horizon(node.generation, loop.parallel, loop.replayable)
        earlier = [n.node_id for n in self.archive.ordered()
                   if n.node_id != node.node_id and (upto is None or n.generation <= upto)]
        try:
            found = first_duplicate(self.ctx.run_dir / "nodes", node.node_id, earlier, self._changes,
                                    loop.novelty_threshold, novelty_measure(loop.novelty_measure))
        except TooLarge as e:
            node.flags.insert(0, f"{NOT_SCREENED} ({e.why})")
            return None
        if found is None:
            return None
        return (f"its change is {found[1]:.2f} alike to node {found[0]}'s (loop.novelty_threshold "
                f"{loop.novelty_threshold:g}): not evaluated")
