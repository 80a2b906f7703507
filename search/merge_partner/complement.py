"""complement: a candidate of another lineage (neither an ancestor nor a descendant of the first parent) such that
each is better on rows the other is not; of those, the one better than the first parent on the most rows (then the
higher score, then `loop.ties`); no merge when none complements it or the candidates carry no rows. The default."""

from __future__ import annotations

from collections.abc import Mapping

from search.merge_partner import lineage
from search.parent_selection import Candidate
from services.choices import Ties


class Complement:
    def partner(self, candidates: list[Candidate], first: str, parent_of: Mapping[str, str | None],
                ties: str) -> Candidate | None:
        chosen = next((c for c in candidates if c.node_id == first), None)
        if chosen is None or not chosen.rows:
            return None
        mine = lineage(first, parent_of)
        found = []
        for c in candidates:
            if c.node_id in mine or first in lineage(c.node_id, parent_of):
                continue
            shared = chosen.rows.keys() & c.rows.keys()
            better = sum(c.rows[r] > chosen.rows[r] for r in shared)
            worse = sum(c.rows[r] < chosen.rows[r] for r in shared)
            if better and worse:
                found.append((better, c))
        if not found:
            return None
        newest_first = -1 if ties == Ties.EARLIEST else 1
        return max(found, key=lambda t: (t[0], t[1].score, newest_first * t[1].order))[1]


STRATEGY = Complement()
