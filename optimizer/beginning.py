"""How a generation begins: its parent (and a merge's second parent), and the model its meta agent runs on.

The parent: the run's strategy over the archive (archive/selection.py), the latest node under the
no_archive baseline, or the workspace's own select_next_parent.py run in a sandbox when the run
lets the agent edit selection (its answer read as untrusted data, the strategy used when it fails).
The meta model: models.meta, or with several a bandit over them (search/meta_model_choice/) rewarded by
the run's records. With a seed, each draw comes from a generator seeded by the run's seed and the
generation's number, so a resumed run, or one whose slots finish in another order, draws the same.
Each choice is logged to archive.jsonl with what it was made from, for a reader who checks it.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from typing import TYPE_CHECKING

from archive.records import GenStart
from archive.selection import Candidate, Context, merge_partner, needs_rows, probabilities, select_parent
from archive.store import Archive, mean_score
from optimizer.events import Events, Warned
from search.meta_model_choice import Pull, arms, choose, pulls_of
from search.registry import meta_model_choice
from services.choices import MetaFailure, NoScore
from services.config import Baseline
from services.errors import UserError
from services.workspace import RunRepo, discard

if TYPE_CHECKING:
    from optimizer.context import RunContext


class Beginnings:
    """Chooses how each generation begins, from the run's context and its archive; each choice is logged."""

    def __init__(self, ctx: RunContext, archive: Archive, repo: RunRepo, events: Events,
                 rng: random.Random | None = None) -> None:
        self.ctx, self.archive, self.repo, self.events = ctx, archive, repo, events
        self.rng = rng or random.Random()  # the draws of a run without a seed
        self._read: dict[tuple[int | None, bool], list[Candidate]] = {}  # one start's reads of the archive

    def rng_of(self, generation: int, what: str = "") -> random.Random:
        seed = self.ctx.loop.seed
        return random.Random(f"{seed}/{generation}{what}") if seed is not None else self.rng

    def start(self, generation: int, upto: int | None = None) -> GenStart:
        """How `generation` starts: its parent, the model its meta agent runs on, and a merge's second parent,
        chosen among the nodes of generations up to `upto` (all when None)."""
        self._read = {}
        parent = self.parent(generation, upto)
        return GenStart(str(generation), parent, generation, self.meta_model(generation, upto),
                        self.partner(generation, upto, parent))

    def merges(self, generation: int) -> bool:
        every = self.ctx.loop.merge_every
        return bool(every) and not generation % every

    def candidates(self, upto: int | None, with_rows: bool) -> list[Candidate]:
        """The candidates among generations up to `upto`, read once per start (a merge generation's parent and
        partner are chosen among the same ones, with their rows)."""
        ctx, read = self.ctx, self._read
        if (upto, with_rows) not in read:
            read[(upto, with_rows)] = self.archive.candidates(
                ctx.domains, ctx.full_sizes, upto, ctx.score_rule,
                failed_meta_bars_parent=ctx.loop.meta_failure == MetaFailure.PARENT, with_rows=with_rows)
        return read[(upto, with_rows)]

    def parent(self, generation: int, upto: int | None = None) -> str:
        """The parent of `generation`, among the nodes of generations up to `upto` (all when None)."""
        settings, archive = self.ctx.loop, self.archive
        if settings.run_baseline == Baseline.NO_ARCHIVE:
            visible = [n for n in archive.ordered() if upto is None or n.generation <= upto]
            return max(visible, key=lambda n: (n.valid_parent, n.generation)).node_id
        candidates = self.candidates(upto, needs_rows(settings.parent_selection) or self.merges(generation))
        if not candidates and settings.no_score == NoScore.INITIAL_AT_ZERO:
            # The reference's select_parent (utils/gl_utils.py): no valid node with a score, so the archive's
            # first node is the one candidate, at 0.0, whatever became of it.
            children = sum(1 for s in archive.started().values() if s.parent == "initial")
            candidates = [Candidate("initial", 0.0, children, 0)]
        if not candidates:
            initial = archive.nodes["initial"]
            raise UserError(f"no node can be a parent: the initial agent is {initial.status}"
                            + (f" ({initial.error})" if initial.error else "") + f"; see {self.ctx.run_dir / 'nodes'}")
        if settings.edit_select_parent:
            chosen, problem = agent_selects_parent(self.ctx, self.archive, self.repo, candidates)
            if chosen:
                return chosen
            archive.log("selection_fallback", reason=problem)
            self.events.emit(Warned(f"select_next_parent.py failed ({problem}); using {settings.parent_selection}"))
        context = Context(generation, settings.ties, settings.tie_tolerance)
        chosen = select_parent(candidates, settings.parent_selection, self.rng_of(generation), context).node_id
        chances = probabilities(candidates, settings.parent_selection, context)
        # The scores are the selection scores, staged-only and initial nodes scaled as the run's ScoreRule says.
        archive.log("parent_chosen", generation=generation, parent=chosen, strategy=settings.parent_selection,
                    candidates={c.node_id: {"score": c.score, "children": c.children, "p": p}
                                for c, p in zip(candidates, chances)})
        return chosen

    def partner(self, generation: int, upto: int | None, parent: str) -> str | None:
        """A merge generation's second parent (every loop.merge_every generations): a node of another
        lineage than `parent`, chosen by loop.merge_partner (search/merge_partner/);
        None when it is no merge generation or no node complements `parent`."""
        if not self.merges(generation):
            return None
        parent_of = {n.node_id: n.parent for n in self.archive.ordered()}
        partner = merge_partner(self.candidates(upto, True), parent, parent_of, self.ctx.loop.ties,
                                self.ctx.loop.merge_partner)
        self.archive.log("merge_partner", generation=generation, parent=parent,
                         partner=partner.node_id if partner else None)
        return partner.node_id if partner else None

    def meta_model(self, generation: int, upto: int | None = None) -> str:
        """The meta model of `generation`: the bandit's choice (loop.meta_bandit) when models.meta is a
        list, rewarded by the nodes of generations up to `upto`; else models.meta."""
        ctx = self.ctx
        if len(ctx.meta_models) == 1:
            return ctx.meta_model
        pulls = bandit_pulls(ctx, self.archive, upto)
        model = choose(ctx.meta_models, pulls, meta_model_choice(ctx.loop.meta_bandit),
                       self.rng_of(generation, "/meta_model"))
        self.archive.log("meta_model_chosen", generation=generation, model=model,
                         arms=[asdict(a) for a in arms(ctx.meta_models, pulls)])
        return model


def bandit_pulls(ctx: RunContext, archive: Archive, upto: int | None = None) -> list[Pull]:
    """The run's finished generations as the bandit counts them, scored as the loop selects."""
    nodes = {n.node_id: n for n in archive.ordered()}  # a copy: slots record nodes meanwhile
    return pulls_of(nodes, lambda n: mean_score(n, ctx.domains, ctx.full_sizes, ctx.score_rule), upto)


def agent_selects_parent(ctx: RunContext, archive: Archive, repo: RunRepo,
                         candidates: list[Candidate]) -> tuple[str | None, str | None]:
    """The latest valid node's own select_next_parent.py picks, run in the sandbox."""
    nodes = archive.nodes
    latest = max((nodes[c.node_id] for c in candidates), key=lambda n: n.generation)
    rows = [{"node_id": c.node_id, "parent": nodes[c.node_id].parent, "score": c.score,
             "generation": nodes[c.node_id].generation, "children": c.children,
             "scores": nodes[c.node_id].scores} for c in candidates]
    assert latest.commit, "a recorded node has its commit"
    workspace = repo.checkout(latest.commit, ctx.workspaces / "select")
    try:
        with ctx.sandboxes.open(workspace, model_calls=False) as box:
            result = box.run([box.python, box.trusted_script("select_parent.py")], box.base_env(),
                             timeout=ctx.loop.selector_timeout_s, input=json.dumps(rows), cwd=box.workdir)
    finally:
        discard(workspace)
    if not result.ok:
        return None, f"{result.why()}: " + " | ".join(result.stderr.strip().splitlines()[-2:])[:300]
    return chosen_parent(result.stdout, {c.node_id for c in candidates})


def chosen_parent(stdout: str, valid: set[str]) -> tuple[str | None, str | None]:
    """The node id the agent's selector printed as its last line (untrusted output), or why there is none."""
    lines = stdout.strip().splitlines()
    try:
        chosen = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):
        return None, f"printed no node id: {stdout[-200:]!r}"
    if not isinstance(chosen, str) or chosen not in valid:
        return None, f"chose {str(chosen)[:200]!r}, which is not a valid parent"
    return chosen, None
