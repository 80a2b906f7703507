"""score_child_prop (the default, the paper's): score_prop's weights times exp(-(children / 8)^3), so a node
already expanded many times gives way to others (the reference's utils/gl_utils.py, select_parent)."""

from __future__ import annotations

from search.parent_selection import Candidate, Context, Weighted, child_weights


class ScoreChildProp(Weighted):
    def weights(self, candidates: list[Candidate], context: Context) -> list[float]:
        return child_weights(candidates)


STRATEGY = ScoreChildProp()
