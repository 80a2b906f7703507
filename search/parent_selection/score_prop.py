"""score_prop: the reference's weights sigmoid(10 (score - mid)), mid the mean of the top-3 scores."""

from __future__ import annotations

from search.parent_selection import Candidate, Context, Weighted, sigmoid_weights


class ScoreProp(Weighted):
    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        return sigmoid_weights(candidates)


STRATEGY = ScoreProp()
