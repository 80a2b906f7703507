"""The held-out grader at work (models.heldout_grader): the proofs the run's best nodes already wrote
are graded again by a model the run never optimizes against, so a task agent that learns its grader
rather than the task shows as a gap between the two grades, generation by generation.

Each time a node is recorded, every generation from its own on is noted with the best node among
the nodes up to it (the run's `loop.best_choice`) and that node's two grades (archive/heldout.py,
`heldout.json`). A best node without a held-out grade is graded first: its proofs of the split its
selection score is made of (its predictions, no new task-agent call), by the domain's grader agent on
the held-out model, booked to the node under the ledger's role `heldout_grader`, kept in
`heldout/<key>/` by the hash of the proofs and the model, so nothing is paid for twice. Under
`loop.best_choice heldout` the rule asks for the held-out grade of each node that would replace the
best so far, and those are graded too.

It is a subscriber of the loop's events, on the controller's thread: at RunStarted (a resumed run
grades what a kill left undone) and at NodeFinished, before the pictures are drawn. Generations in
flight on other slots wait at their next event while it grades, which happens when the best changes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from archive.heldout import (
    ROLE,
    GenerationGap,
    Grade,
    HeldOutRecord,
    HeldOutStore,
    gap_interval,
    read_heldout,
    write_heldout,
)
from archive.promotion import row_scores
from archive.records import Node
from archive.store import Archive, untrusted_dir
from domains.base import Domain
from domains.harness import PREDICTIONS, grade_run
from domains.scoring import Graded
from optimizer.evaluation import BudgetStop, Evaluator, NodeTools
from optimizer.events import Event, Events, HeldOutGraded, NodeFinished, RunStarted, Warned
from search.registry import best_choice_rule
from services.config import Config
from services.errors import UserError
from services.fsutil import atomic_write_bytes, read_bounded
from services.local_model import is_local
from services.providers import provider_of
from services.sandbox import SandboxClosed

if TYPE_CHECKING:
    from optimizer.context import RunContext

MAX_PROOFS = 2**28  # a predictions.csv read to be graded again: 60 proofs within the harness's 1 MB each


def graded_domains(domains: list[Domain]) -> dict[str, Graded]:
    """The domains scored by a grader model (imo_proof), with their scorer: what a held-out grader regrades."""
    return {d.name: d.scorer for d in domains if isinstance(d.scorer, Graded)}


def check_heldout(domains: list[Domain], config: Config) -> None:
    """A UserError when the config asks for what the run's domains cannot give, or for a held-out grader
    that is a model the run grades with: compared as the provider's model each name resolves to (a role
    alias such as `grader`, `auto` once chosen, a name without its provider), since the same model under
    another name would agree with itself and show a gap of 0 by construction."""
    model = config.models.heldout_grader
    if best_choice_rule(config.loop.best_choice).reads_heldout and (model is None or not graded_domains(domains)):
        raise UserError("loop.best_choice heldout needs models.heldout_grader and a domain graded by a grader "
                        "model (imo_proof)")
    if model is None:
        return
    heldout = provider_model(config.resolve_model("heldout_grader"))
    graders = {config.resolve_model("grader")}.union(*(s.models(config) for s in graded_domains(domains).values()))
    for grader in sorted(graders):
        if provider_model(grader) == heldout:
            raise UserError(f"models.heldout_grader ({model}) is models.grader's own model ({heldout}, which the "
                            f"run grades with as {grader}): a held-out grader is another model")


def provider_model(model: str) -> str:
    """`model` as provider/name, the provider litellm sends it to (o4-mini and openai/o4-mini are one
    model); UserError when litellm does not know it."""
    if is_local(model):
        return model
    provider = provider_of(model)
    return f"{provider}/{model.removeprefix(provider + '/')}"


def heldout_models(domains: list[Domain], config: Config) -> list[str]:
    """The held-out grader's model when the run will call it, for the preflight."""
    model = config.models.heldout_grader
    return [model] if model is not None and graded_domains(domains) else []


class HeldOut:
    """Grades the best nodes' proofs again with models.heldout_grader, as an event subscriber of the loop."""

    def __init__(self, ctx: RunContext, archive: Archive, events: Events, evaluator: Evaluator) -> None:
        self.ctx, self.archive, self.events, self.evaluator = ctx, archive, events, evaluator
        self.model = ctx.config.resolve_model(ROLE)
        self.grader = ctx.config.resolve_model("grader")
        self.graded = graded_domains(ctx.domains)
        self.store = HeldOutStore(ctx.run_dir)
        self.choice = ctx.best_choice
        ctx.gateway.allow_models(self.model)
        found = read_heldout(ctx.run_dir)
        self.renote = found is not None and found.model != self.model  # notes made with another model
        self.record = found or HeldOutRecord(self.model, list(self.graded))
        self.record.model, self.record.domains = self.model, list(self.graded)

    def __call__(self, event: Event) -> None:
        if not self.graded:
            return
        if isinstance(event, RunStarted):
            noted = {g.generation for g in self.record.generations}
            missing = {n.generation for n in self.archive.ordered()} - (set() if self.renote else noted)
            if missing:
                self.catch_up(min(missing))
        elif isinstance(event, NodeFinished):
            self.catch_up(event.node.generation)

    def catch_up(self, since: int) -> None:
        """Note each recorded generation from `since` on, grading first the nodes its best needs."""
        try:
            for generation in sorted({n.generation for n in self.archive.ordered() if n.generation >= since}):
                best = self._grade_needed(generation)
                if best is not None:
                    self.record.note(GenerationGap(generation, best.node_id, self.record.optimized_grade(best.node_id),
                                                   self.record.node_grade(best.node_id)))
        except BudgetStop as e:
            self.events.emit(Warned(f"held-out grading stopped: {e}"))
        finally:
            write_heldout(self.ctx.run_dir, self.record)

    def _grade_needed(self, upto: int) -> Node | None:
        """The best node of the generations up to `upto`, once it and every node the best choice asked
        the held-out grade of are graded (the earliest first: a grade can change what is asked next)."""
        ctx = self.ctx
        asked: list[Node] = []

        def grade_of(node: Node) -> float | None:
            asked.append(node)
            return self.record.node_grade(node.node_id)

        while True:
            asked.clear()
            best = self.archive.best(ctx.domains, ctx.full_sizes, self.choice, upto, ctx.score_rule, grade_of)
            pending = [n for n in [*asked, best] if n is not None and not self.record.graded(n.node_id)]
            if not pending:
                return best
            node = min(pending, key=lambda n: (n.generation, n.node_id))
            for domain in ctx.domains:
                if domain.name in self.graded and self.record.grade(node.node_id, domain.name) is None:
                    grade = self._grade(node, domain, self.graded[domain.name])
                    self.record.add(grade)
                    write_heldout(ctx.run_dir, self.record)
                    # In the event log too, which is what a watcher of the run (the dashboard) re-reads on.
                    self.archive.log("heldout_graded", node_id=node.node_id, domain=domain.name, key=grade.key,
                                     optimized=grade.optimized, heldout=grade.heldout)

    def _grade(self, node: Node, domain: Domain, scorer: Graded) -> Grade:
        """The node's proofs of `domain` graded again, or why they could not be; told on the console."""
        ctx = self.ctx
        split = self._scored_split(node, domain)
        key = node.eval_key(domain.name, split)
        base = Grade(node.node_id, node.generation, domain.name, self.grader, self.model, split, eval_key=key)
        try:
            report = self.evaluator.store.report(key) if key else None
            if key is None or report is None:
                raise UserError(f"no evaluation of its {split} proofs to grade")
            mine = row_scores(report, domain.score_key) or {}
            graded, address, cost = self._graded_report(node, scorer, key)
            grade = replace(base, rows=len(mine), optimized=_share(report.get(domain.score_key)),
                            heldout=_share(graded.get(domain.score_key)), key=address, cost_usd=round(cost, 6),
                            gap_interval=gap_interval(mine, row_scores(graded, domain.score_key) or {}))
        except (BudgetStop, SandboxClosed):
            raise
        except UserError as e:
            if ctx.gateway.budget_left_message():
                raise BudgetStop(str(e)) from None
            grade = replace(base, error=str(e)[:300])
        except Exception as e:  # a provider's outage stops the run (ProviderDown); else the grading failed
            ctx.gateway.confirm_outage()
            grade = replace(base, error=f"{type(e).__name__}: {e}"[:300])
        self.events.emit(HeldOutGraded(node.node_id, grade_line(grade)))
        return grade

    def _scored_split(self, node: Node, domain: Domain) -> str:
        """The split whose evaluation the node's selection score is made of (archive.store.selection_score)."""
        rule = self.ctx.score_rule
        full = node.full_eval.get(domain.name) or (rule.scale_initial and node.node_id == "initial")
        return domain.selection_split if full or rule.staged_split == "selection" else "train"

    def _graded_report(self, node: Node, scorer: Graded, key: str) -> tuple[dict, str, float]:
        """The held-out grader's report on the proofs of evaluation `key`, graded now or found graded, with
        its folder's key under heldout/ and what grading them cost now."""
        ctx = self.ctx
        proofs = read_bounded(self.evaluator.store.predictions(key), MAX_PROOFS)
        address = self.store.address(proofs, scorer.grading.name, scorer.grader_agent, self.model)
        report = self.store.report(address)
        cost = 0.0
        if report is None:
            graded = self.store.folder(address) / PREDICTIONS
            if not graded.exists():
                atomic_write_bytes(graded, proofs)
            ledger, run_id = ctx.gateway.ledger, ctx.gateway.run_id
            before = ledger.totals(run_id=run_id, node=node.node_id, role=ROLE).cost_usd
            grading = scorer.grading
            # A scorer types its grading domain by the little it reads; the one it grades with is a registered domain.
            assert isinstance(grading, Domain)
            result = self.evaluator.kept(node.node_id, grade_run(
                grading, scorer.grader_agent, graded, ctx.config, ctx.gateway, sandboxes=ctx.sandboxes,
                model=self.model, node=node.node_id, transcripts=untrusted_dir(ctx.run_dir, node.node_id, ROLE),
                role=ROLE))
            report = grading.scorer.score(grading, result.folder / PREDICTIONS, NodeTools(self.evaluator, node.node_id))
            self.store.save_report(address, report)
            cost = ledger.totals(run_id=run_id, node=node.node_id, role=ROLE).cost_usd - before
        return report, address, cost


def _share(value: object) -> float:
    """A report's score, checked: the report was made from an agent's output."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise UserError(f"the report's score is not a share between 0 and 1: {str(value)[:40]}")
    return float(value)


def grade_line(grade: Grade) -> str:
    """The console's line for a grading: both grades of the node's proofs and the gap, or why there is none."""
    where = f"held-out grader: node {grade.node_id} (generation {grade.generation}) {grade.domain}"
    if grade.optimized is None or grade.heldout is None:
        return f"{where}: not graded again ({grade.error})"
    band = f" [{grade.gap_interval[0]:+.3f}, {grade.gap_interval[1]:+.3f}]" if grade.gap_interval else ""
    return (f"{where} {grade.split}, {grade.rows} proofs: {grade.grader} {grade.optimized:.3f}, held-out "
            f"{grade.model} {grade.heldout:.3f}, gap {grade.gap:+.3f}{band}; cost ${grade.cost_usd:.4f}")
