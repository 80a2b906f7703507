"""The test split, evaluated once, at the end, for the node chosen on val (and the initial node);
and whole splits evaluated after a run for nodes of one's choosing (`--evaluate`).

The loop selects parents and its best node on val (train where a domain has no val) and
never sees a test score: `loop.final_test` (`--final_test`) evaluates the test split after
the last generation is recorded, for the chosen node and for the initial node, the
baseline the improvement is measured from. The scores go to `final_test.json` at the
run's root, never into node records, so nothing the loop reads can depend on them.
Evaluations are content-addressed (EvalStore): running it again, or after a resume that
chose the same node, pays nothing.

`--resume_from RUN --evaluate NODES --split S` evaluates S in full for the nodes named, for
what reads finished runs (an ensemble over the archive's best nodes on test needs each
member's test predictions: `apps.ensemble --rows all` asks for it). The scores go to
`evaluations.json`, which the loop never reads either; rows a node already answered with the
same task agent and model (a 10-row stage, an evaluation cut short) are not paid again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from archive.experiments import EVALUATIONS, FINAL_TEST, Evaluations, FinalTest, read_evaluations, read_final_test
from archive.records import DomainEval, Node
from archive.store import Archive, untrusted_dir
from optimizer.evaluation import BudgetStop, Evaluator, LoadFailed
from services.errors import UserError
from services.fsutil import atomic_write_json
from services.workspace import RunRepo

if TYPE_CHECKING:
    from optimizer.context import RunContext


class Tested(Protocol):
    """What a final test or an evaluation of chosen nodes reads of the loop: the run's context, its archive,
    repository and evaluator."""

    @property
    def ctx(self) -> RunContext: ...
    @property
    def archive(self) -> Archive: ...
    @property
    def repo(self) -> RunRepo: ...
    @property
    def evaluator(self) -> Evaluator: ...


def tested_domains(domains: list) -> list:
    return [d for d in domains if "test" in d.splits]


def run_final_test(loop: Tested) -> Path | None:
    """Evaluate test for the best node and the initial node; the path of final_test.json, or None
    when no domain of the run has a test split or no node can be chosen."""
    domains = tested_domains(loop.ctx.domains)
    best = loop.ctx.best(loop.archive)
    if not domains or best is None:
        return None
    path = loop.ctx.run_dir / FINAL_TEST
    record = read_final_test(path) or FinalTest()
    record.chosen_on = ", ".join(sorted({d.selection_split for d in loop.ctx.domains}))
    record.best = best.node_id
    for node_id in dict.fromkeys([best.node_id, "initial"]):
        node = loop.archive.nodes[node_id]
        record.nodes[node_id] = _evaluate(loop, node, domains, "test")
        atomic_write_json(path, record.to_dict())  # each node as soon as it is done: a kill loses at most one
    return path


def check_evaluate(nodes: dict, domains: list, node_ids: list[str], split: str) -> list:
    """The domains `split` is evaluated on; a UserError for a node or a split the run lacks."""
    if not node_ids:
        raise UserError("--evaluate: name at least one node")
    for node_id in node_ids:
        node = nodes.get(node_id)
        if node is None:
            raise UserError(f"--evaluate {node_id}: the run has no such node")
        if not node.valid_parent:
            raise UserError(f"--evaluate {node_id}: node {node_id} is {node.status}, it has no agent to evaluate")
        if not node.commit:  # a handed folder's record may lack it (the loop's own always have one)
            raise UserError(f"--evaluate {node_id}: node {node_id}'s record names no commit of its agent")
    found = [d for d in domains if split in d.splits]
    if not found:
        raise UserError(f"--split {split}: no domain of the run has it")
    return found


def run_evaluations(loop: Tested, node_ids: list[str], split: str) -> list[str]:
    """Evaluate `split` in full for each node named (every domain of the run that has it), into
    evaluations.json; a line per node and domain."""
    domains = check_evaluate(loop.archive.nodes, loop.ctx.domains, node_ids, split)
    path = loop.ctx.run_dir / EVALUATIONS
    record = read_evaluations(path) or Evaluations()
    lines = []
    for node_id in dict.fromkeys(node_ids):
        try:
            scores = _evaluate(loop, loop.archive.nodes[node_id], domains, split)
        except (BudgetStop, LoadFailed) as e:  # what is done is kept: evaluations.json holds the nodes before
            raise UserError(f"node {node_id} not evaluated on {split}: {e}") from None
        for name, found in scores.items():
            record.nodes.setdefault(node_id, {}).setdefault(name, {})[split] = found
            lines.append(f"evaluated: node {node_id} {name}/{split}={found.text()}")
        atomic_write_json(path, record.to_dict())
    return lines


def _evaluate(loop: Tested, node: Node, domains: list, split: str) -> dict[str, DomainEval]:
    evaluator = loop.evaluator
    part = "final_test" if split == "test" else f"evaluate_{split}"
    transcripts = untrusted_dir(loop.ctx.run_dir, node.node_id, part)
    assert node.commit, f"node {node.node_id} has no commit to evaluate"  # only a node still running lacks one
    with evaluator.node_sandbox(f"{node.node_id}-{split}", loop.archive.node_dir(node.node_id), transcripts) as box:
        box.fill(loop.repo, node.commit)
        scores = evaluator.evaluate_splits(domains, box, loop.repo.task_agent_hash(node.commit), split)
    return {name: s.record() for name, s in scores.items()}


def final_test_lines(path: Path) -> list[str]:
    """What the final test found, a line per node and domain."""
    record = read_final_test(path) or FinalTest()
    lines = []
    for node_id, domains in record.nodes.items():
        role = f"chosen on {record.chosen_on or 'val'}" if node_id == record.best else "baseline"
        for name, found in domains.items():
            lines.append(f"final test: node {node_id} ({role}) {name}/test={found.text()}")
    return lines
