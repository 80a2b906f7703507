"""pareto: GEPA's per-instance Pareto front. For each row of the selection split, the nodes that score highest
on it; a node that is on some row's front only beside others that stay kept is dropped (lowest mean first);
each remaining node is drawn in proportion to the rows it leads on. A node best on a few hard rows survives a
lower mean. Only full evaluations have rows: nodes that stopped at screening are not on the front, and with
no rows at all it draws as score_child_prop."""

from __future__ import annotations

import math

from search.parent_selection import Candidate, Context, Weighted, child_weights
from services.choices import Ties


class Pareto(Weighted):
    needs_rows = True

    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        best: dict[str, float] = {}
        for c in candidates:
            for row, value in c.rows.items():
                best[row] = max(best.get(row, value), value)
        if not best:
            return child_weights(candidates)
        fronts = [{i for i, c in enumerate(candidates) if c.rows.get(row, -math.inf) >= top - 1e-9}
                  for row, top in best.items()]
        kept = set().union(*fronts)
        preferred_last = -1 if context.ties == Ties.EARLIEST else 1  # of equal means, the preferred is dropped last
        for i in sorted(kept, key=lambda i: (candidates[i].score, preferred_last * candidates[i].order)):
            if all(len(front & kept) > 1 for front in fronts if i in front):
                kept.discard(i)  # every row it leads on is led by another kept candidate too
        return [float(sum(i in front for front in fronts)) if i in kept else 0.0 for i in range(len(candidates))]


STRATEGY = Pareto()
