"""The loop's side of racing (`loop.racing`, search/racing.py): which rows of a child's selection split a race
runs, what it must reach, and its chunks evaluated through the Evaluator, each kept in the EvalStore as any
split's evaluation (a chunk starts from the previous one's journal), so a race a kill interrupted resumes
with no row paid twice and, its target fixed by the generation, reaches the same verdict."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from archive.store import loop_sizes, run_score
from search.racing import RaceVerdict, Racing, Target, looks, race, target_of
from search.registry import promotion_rule

if TYPE_CHECKING:
    from archive.records import Node
    from domains.base import Domain
    from optimizer.context import RunContext
    from optimizer.evaluation import DomainResult, Evaluator, NodeSandbox, Peers


class Racer:
    def __init__(self, evaluator: Evaluator, split_rows: Callable[[Domain, str, int], int]) -> None:
        self.evaluator = evaluator
        self.loop = evaluator.config.loop
        self.split_rows = split_rows  # optimizer.evaluation's: how many rows an evaluation of a split covers

    def races(self, domain: Domain) -> bool:
        """Whether `domain`'s selection split runs as a race: with loop.racing, when scoring it calls no model.
        A domain scored by a grader or a judge scores all its rows again at every look (its rows' predictions
        are kept, their grades are not), so a race would pay its scoring several times over."""
        return bool(self.loop.racing) and not domain.scorer.models(self.evaluator.config)

    def start(self, domain: Domain) -> int:
        """Rows of the selection split the screening already ran (its last stage's, when it runs that split)."""
        if domain.selection_split not in self.evaluator.stage_splits(domain):
            return 0
        return max((s.rows for s in domain.screening(self.loop)), default=0)

    def total(self, domain: Domain) -> int:
        return self.split_rows(domain, domain.selection_split, self.loop.eval_samples)

    def looks(self, domain: Domain) -> list[int]:
        """The rows of the selection split at each look of a race, the last one all of them."""
        return looks(self.start(domain), self.total(domain), self.loop.racing_chunk)

    def evaluated_in_full(self, domains: list[Domain], agent_hash: str) -> bool:
        """Whether every domain's selection split already has its full evaluation for this task agent (an earlier
        node with the same code and model): the full evaluation then reuses it and pays nothing, so no race."""
        evaluator = self.evaluator
        return all(evaluator.store.report(evaluator.store.key(agent_hash, d.name, d.selection_split, self.total(d),
                                                              evaluator.task_model)) is not None for d in domains)

    def target(self, domains: list[Domain], peers: Peers) -> Target | None:
        """What a racing child must reach: the best's score, or its promotion rules' bar (each domain's last
        stage's rule) when lower; None without a best."""
        own: Target | None = None
        for d in domains:
            stages = d.screening(self.loop)
            rule = promotion_rule((stages[-1].rule if stages else None) or self.loop.promotion)
            # A plug-in's rule without a race_bar sets no bar of its own.
            bar: Callable[[Target | None, float | None], Target | None] | None = getattr(rule, "race_bar", None)
            found = bar(peers.parent_target, peers.best_low) if bar is not None else None
            if found is not None and (own is None or found.bar < own.bar):
                own = found
        return target_of(peers.best_target, own)

    def run(self, domains: list[Domain], node: NodeSandbox, agent_hash: str, peers: Peers,
            results: dict[str, DomainResult]) -> RaceVerdict | None:
        """Race the child on each domain's selection split, its scores so far put into `results`; None when
        there is no race (racing off, no best to reach, no look before the last row)."""
        target = self.target(domains, peers) if all(self.races(d) for d in domains) else None
        if target is None:
            return None
        if self.evaluated_in_full(domains, agent_hash):  # reused, as any evaluation of the same task agent is
            return None
        plan = {d.name: (self.start(d), self.total(d)) for d in domains}
        if all(len(looks(start, total, self.loop.racing_chunk)) < 2 for start, total in plan.values()):
            return None
        by_name = {d.name: d for d in domains}

        def evaluate(rows: Mapping[str, int]) -> dict[str, list[float] | None]:
            seen: dict[str, list[float] | None] = {}
            for name, n in rows.items():
                d = by_name[name]
                found = self.evaluator.split(d, d.selection_split, n, node, agent_hash)
                results[name].splits[d.selection_split] = found
                seen[name] = list(found.row_scores.values()) if found.row_scores and found.score is not None \
                    else None
            return seen

        return race(Racing(self.loop.racing_chunk, self.loop.racing_alpha), target, plan, evaluate)


def race_targets(ctx: RunContext, best: Node | None, parent: Node | None) -> dict:
    """What a child's race may compare with (optimizer.evaluation.Peers' fields): the best node and the parent
    as targets (their selection scores), and the low end of the best's 95% interval on the selection split(s),
    averaged over domains (None unless every domain has one)."""

    def target(node: Node | None, who: str) -> Target | None:
        score = run_score(node, loop_sizes(ctx.domains, ctx.full_sizes), ctx.score_rule) if node else None
        return None if node is None or score is None else Target(score, f"{who} {node.node_id}'s score {score:.3f}")

    lows = [band[0] for d in ctx.domains
            if best and (found := best.evaluation(d.name, d.selection_split)) and (band := found.interval)]
    return {"best_target": target(best, "the best node"), "parent_target": target(parent, "its parent"),
            "best_low": sum(lows) / len(lows) if best and len(lows) == len(ctx.domains) else None}
