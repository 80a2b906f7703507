"""A run as the Python API returns it (hyperagents.load_run, run, evaluate): frozen dataclasses read from the
run's own records (node.json through archive.records, the ledger through archive.run_folder), so a run started
on the command line reads the same as one started from Python."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from archive.eval_store import EvalStore
from archive.records import DomainEval, Node
from archive.row_costs import FrontPoint, RowCost, front_of, node_row_cost
from archive.run_folder import ledger_of
from archive.store import observed_sizes


@dataclass(frozen=True)
class Score:
    """One evaluation of one split: the domain's score (its score key), the rows it is over, its 95% interval."""

    value: float | None  # None: evaluated, but nothing could be scored
    rows: int | None  # rows scored (None when the record does not say)
    interval: tuple[float, float] | None  # 95%: Wilson for right/wrong rows, bootstrap for partial credit

    @classmethod
    def of(cls, found: DomainEval) -> Score:
        return cls(found.score, found.rows, found.interval)


@dataclass(frozen=True)
class Spend:
    """Money and tokens of a role's model calls (meta, try, task, grader, judge)."""

    cost_usd: float
    tokens: int


@dataclass(frozen=True)
class NodeView:
    """One agent version of a run, as its node.json records it."""

    id: str  # "initial", or the generation's number
    parent: str | None
    generation: int
    status: str  # ok, no_change, duplicate, meta_failed, load_failed, eval_failed, budget_stopped, lost
    scores: dict[str, dict[str, Score]]  # domain -> split -> score
    full_eval: dict[str, bool]  # domain -> whether it passed screening and was evaluated in full
    spend: dict[str, Spend]  # role -> what the node's calls cost
    error: str | None
    row_costs: dict[str, RowCost]  # domain -> what a row of its evaluations costs (archive/row_costs.py)
    raced_out: str | None = None  # loop.racing's verdict when its full evaluation stopped early (search/racing.py)


@dataclass(frozen=True)
class RunView:
    """A run folder read as data, finished or still running."""

    path: Path
    name: str  # --name / run(name=...); "" when unnamed
    tags: tuple[str, ...]
    domains: tuple[str, ...]
    state: str  # new, running, finished, stopped or interrupted (archive/run_state.py)
    nodes: dict[str, NodeView]  # by id, in generation order
    best: NodeView | None  # the run's best by its own loop.best_choice; None before a node is scored
    spend: dict[str, Spend]  # role -> the whole run's calls (the ledger's; the nodes' records without one)
    cost_usd: float
    tokens: int
    config: dict  # the run's configuration, as run.json keeps it
    front: dict[str, list[FrontPoint]]  # domain -> its nodes by selection score and $ a row, the front marked


@dataclass(frozen=True)
class EvalResult:
    """An agent's evaluation on one split of one domain."""

    domain: str
    split: str
    score: Score
    folder: Path  # where its predictions are: a harness folder, or the run whose node was evaluated


def node_view(node: Node, row_costs: dict[str, RowCost] | None = None) -> NodeView:
    scores: dict[str, dict[str, Score]] = {}
    for domain, split, found in node.evaluations():
        scores.setdefault(domain, {})[split] = Score.of(found)
    spend = {role: Spend(usd, node.tokens.get(role, 0)) for role, usd in node.cost_usd.items()}
    return NodeView(node.node_id, node.parent, node.generation, str(node.status), scores, dict(node.full_eval),
                    spend, node.error, dict(row_costs or {}), node.raced_out)


def run_spend(run_dir: Path, nodes: list[Node]) -> dict[str, Spend]:
    spend: dict[str, Spend] = {}
    for row in ledger_of(run_dir).spend():
        old = spend.get(row["role"], Spend(0.0, 0))
        spend[row["role"]] = Spend(old.cost_usd + row["cost_usd"],
                                   old.tokens + row["prompt_tokens"] + row["completion_tokens"])
    if not spend:  # a run copied without its ledger: what its nodes recorded
        for node in nodes:
            for role, usd in node.cost_usd.items():
                old = spend.get(role, Spend(0.0, 0))
                spend[role] = Spend(old.cost_usd + usd, old.tokens + node.tokens.get(role, 0))
    return spend


def run_row_costs(run_dir: Path, domains: list[str], nodes: list[Node]) -> tuple[dict[str, dict[str, RowCost]],
                                                                                 dict[str, list[FrontPoint]]]:
    """Per node, what a row of each domain costs; per domain, the front (archive/row_costs.py). A cost record
    that is not one the run wrote is a UserError naming it, as a garbled report is."""
    store, sizes = EvalStore(run_dir), observed_sizes(domains, nodes)
    costs = {n.node_id: {d: cost for d in n.eval_keys if (cost := node_row_cost(n, d, store.tally)) is not None}
             for n in nodes}
    return costs, {d: front_of(nodes, d, sizes[d][0], store.tally)[0] for d in domains}
