"""Which node of an imo_grading run `setup_proofgrader_repo --generate_dir` packages as the grader.

Two rules, by name (`CHOICES`); both rank on the selection split of imo_grading (val):

- `paper`, the HyperAgents reference's (domains/imo/setup_proofgrader_repo.py, `setup_from_run`):
  every node of the run whose val report has a normalized MAE that is a number (NaN is not), whatever
  the node's status and whether its evaluation went past screening; the lowest MAE wins, and equal
  MAEs go to the node earlier in the archive (the reference stable-sorts the archive's order).
  Accuracy plays no part; the reference prints the top 3 by it, as here, and nothing more.
- `full_eval`: only nodes that ended OK and finished the full evaluation; the lowest val normalized
  MAE, then the higher val accuracy, then the earlier node.

Where a run's nodes differ from the reference's: the reference screened a child on 10 rows of
every split, val included, so a child that stopped at screening ranks with a 10-row val MAE beside
the full evaluations' 100-row ones, and one lucky 10-row score can win. A run with
`loop.stage_splits: train_and_val` (`--preset paper`) screens the same way and `paper` ranks such
children as the reference does; with the default screening (train rows only) they have no val
report and are no candidate under either rule.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GRADING_DOMAIN = "imo_grading"
CHOICES = ("paper", "full_eval")
MAE, ACCURACY = "normalized_mean_absolute_error", "overall_accuracy"
TOP_N = 3


@dataclass
class Candidate:
    node_id: str
    generation: int
    commit: str
    scores: dict  # split -> that split's report
    position: int = 0  # place in the archive's order (generation, then time recorded)
    status: str = "ok"
    full: bool = True  # whether its evaluation went past screening to the full splits


@functools.cache
def selection_split() -> str:
    """The split graders are ranked on: the one parent selection of the grading domain scores on."""
    from domains.registry import get_domain

    return get_domain(GRADING_DOMAIN).selection_split


def _number(value: object) -> float | None:
    """`value` when it is a real number (not a bool, not NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def collect(run_dir: Path) -> list[Candidate]:
    """Every node of the run with a normalized MAE on the selection split, in the archive's order."""
    from archive.eval_store import EvalStore
    from archive.store import Archive

    evals, split = EvalStore(run_dir), selection_split()
    found = []
    for position, node in enumerate(Archive(run_dir).ordered()):
        keys = node.eval_keys.get(GRADING_DOMAIN, {})
        scores = {name: report for name, key in keys.items() if (report := evals.report(key)) is not None}
        if split in scores and _number(scores[split].get(MAE)) is not None and node.commit:
            found.append(Candidate(node.node_id, node.generation, node.commit, scores, position,
                                   str(node.status), bool(node.full_eval.get(GRADING_DOMAIN))))
    return found


def eligible(candidates: list[Candidate], choice: str) -> list[Candidate]:
    if choice == "paper":
        return list(candidates)
    return [c for c in candidates if c.full and c.status == "ok"]


def _mae(c: Candidate) -> float:
    mae = _number(c.scores[selection_split()].get(MAE))
    assert mae is not None  # collect keeps only the nodes that have one
    return mae


def _accuracy(c: Candidate) -> float:
    """Val accuracy, or minus infinity when the report has none (it then ranks last)."""
    found = _number(c.scores[selection_split()].get(ACCURACY))
    return -math.inf if found is None else found


def rank_key(choice: str) -> Callable[[Candidate], tuple[float, ...]]:
    """The sort key `choice` ranks candidates by: the smallest is the one packaged."""
    if choice == "paper":
        return lambda c: (_mae(c), c.position)
    return lambda c: (_mae(c), -_accuracy(c), c.position)


def choose(candidates: list[Candidate], choice: str) -> Candidate | None:
    """The node `choice` packages among `candidates`, or None when none is eligible."""
    pool = eligible(candidates, choice)
    return min(pool, key=rank_key(choice)) if pool else None


def describe(choice: str) -> str:
    split = selection_split()
    if choice == "paper":
        return (f"the paper's rule: the lowest {split} normalized MAE of any node with one, "
                "ties to the earlier node")
    return (f"the full_eval rule: the lowest {split} normalized MAE among nodes that finished the full "
            f"evaluation, ties to the higher {split} accuracy, then the earlier node")


def ranking_lines(candidates: list[Candidate], choice: str) -> list[str]:
    """The top nodes of the eligible ones by each metric, as the command prints them."""
    split, pool = selection_split(), eligible(candidates, choice)

    def row(c: Candidate) -> str:
        accuracy = _number(c.scores[split].get(ACCURACY))
        shown = "n/a" if accuracy is None else f"{accuracy:.3f}"
        return (f"  node {c.node_id:>8} (generation {c.generation}): {split} normalized MAE "
                f"{_mae(c):.3f}, {split} accuracy {shown}")

    by_mae = sorted(pool, key=rank_key(choice))[:TOP_N]
    then = (lambda c: c.position) if choice == "paper" else rank_key(choice)  # the reference: a stable sort
    by_acc = sorted(pool, key=lambda c: (-_accuracy(c), then(c)))[:TOP_N]
    return [f"top {len(by_mae)} by {split} normalized MAE (lower is better):", *map(row, by_mae),
            f"top {len(by_acc)} by {split} accuracy:", *map(row, by_acc)]
