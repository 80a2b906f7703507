"""Which node of an imo_grading run `setup_proofgrader_repo --generate_dir` packages as the grader.

Two rules, by name (`CHOICES`); both rank on the selection split of imo_grading (val):

- `paper`, the HyperAgents reference's (domains/imo/setup_proofgrader_repo.py, `setup_from_run`):
  every node of the run whose val report has a normalized MAE that is a number (NaN is not), whatever
  the node's status and whether its evaluation went past screening; the lowest MAE wins, and equal
  MAEs go to the node earlier in the archive (the reference stable-sorts the archive's order).
  Accuracy plays no part; the reference prints the top 3 by it, as here, and nothing more.
- `full_eval`: only nodes that ended OK and finished the full evaluation; the lowest val normalized
  MAE, then the higher val accuracy, then the earlier node.

Two more rank on val accuracy and on what a proof's grading costs (archive/row_costs.py: the task agent's
calls per row, from the ledger), among nodes that ended OK and finished the full evaluation:

- `best`: the highest val accuracy, ties to the lower val normalized MAE, then the cheaper per row, then the
  earlier node.
- `cheapest_within=D`: among those whose val accuracy is at least the best's less D (point estimates, not
  intervals: D is the accuracy you agree to give up, and both nodes' intervals are printed beside it so you
  see whether the difference is noise), the one with the lowest known $ per row, ties to the higher accuracy,
  then the earlier node. A node whose price is unknown is never the cheapest.

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
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from archive.row_costs import RowCost, node_tallies, per_row, pooled, usd_text
from search.stats import interval_text
from services.errors import UserError

GRADING_DOMAIN = "imo_grading"
CHOICES = ("paper", "full_eval", "best", "cheapest_within=D")
WITHIN = "cheapest_within="
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
    interval: tuple[float, float] | None = None  # val accuracy's 95% interval
    cost: RowCost | None = None  # what a row's grading cost (read only for the rules that rank by it)


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


def collect(run_dir: Path, costs: bool = False) -> list[Candidate]:
    """Every node of the run with a normalized MAE on the selection split, in the archive's order; with `costs`,
    each with its cost per row (a forged cost record is a UserError naming it)."""
    from archive.eval_store import EvalStore
    from archive.store import Archive

    evals, split = EvalStore(run_dir), selection_split()
    found = []
    for position, node in enumerate(Archive(run_dir).ordered()):
        keys = node.eval_keys.get(GRADING_DOMAIN, {})
        scores = {name: report for name, key in keys.items() if (report := evals.report(key)) is not None}
        if split in scores and _number(scores[split].get(MAE)) is not None and node.commit:
            band = node.intervals.get(GRADING_DOMAIN, {}).get(split)
            tally = pooled(node_tallies(node, GRADING_DOMAIN, evals.tally).values()) if costs else None
            found.append(Candidate(node.node_id, node.generation, node.commit, scores, position,
                                   str(node.status), bool(node.full_eval.get(GRADING_DOMAIN)),
                                   (band[0], band[1]) if band else None, per_row(tally) if tally else None))
    return found


PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", re.ASCII)


def parse_choice(text: str) -> str:
    """`text` as a rule's name, `cheapest_within=D` with D a number from 0 to 1 written plainly; else a UserError
    in one line."""
    if text in CHOICES[:3]:
        return text
    if text.startswith(WITHIN):
        value = text[len(WITHIN):]
        # Plain ASCII decimals only: float() also takes "0_0_1", full-width digits, spaces and 1e-400.
        within = float(value) if PLAIN_NUMBER.fullmatch(value) and len(value) <= 20 else math.nan
        if 0 <= within <= 1:  # NaN is neither
            return f"{WITHIN}{within:g}"
        raise UserError(f"--choose {text[:60]!r}: D of cheapest_within=D is how much val accuracy you give up "
                        "for a cheaper grader, a number from 0 to 1 (e.g. cheapest_within=0.02)")
    raise UserError(f"--choose {text[:60]!r}: expected one of paper, full_eval, best, cheapest_within=D")


def within_of(choice: str) -> float | None:
    """D of `cheapest_within=D` (as parse_choice wrote it), None for another rule."""
    return float(choice[len(WITHIN):]) if choice.startswith(WITHIN) else None


def _usd(c: Candidate) -> float:
    """$ per row, infinity where unknown (it ranks last)."""
    return math.inf if c.cost is None or c.cost.usd is None else c.cost.usd


def eligible(candidates: list[Candidate], choice: str) -> list[Candidate]:
    if choice == "paper":
        return list(candidates)
    pool = [c for c in candidates if c.full and c.status == "ok"]
    within = within_of(choice)
    if within is None or not pool:
        return pool
    floor = _accuracy(min(pool, key=rank_key("best"))) - within
    return [c for c in pool if _accuracy(c) >= floor - 1e-12]  # 0.95 is within 0.05 of 1.0, rounding aside


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
    if choice == "best":
        return lambda c: (-_accuracy(c), _mae(c), _usd(c), c.position)
    if choice.startswith(WITHIN):
        return lambda c: (_usd(c), -_accuracy(c), c.position)
    return lambda c: (_mae(c), -_accuracy(c), c.position)


def choose(candidates: list[Candidate], choice: str) -> Candidate | None:
    """The node `choice` packages among `candidates`, or None when none is eligible."""
    pool = eligible(candidates, choice)
    if choice.startswith(WITHIN) and pool and all(_usd(c) == math.inf for c in pool):
        raise UserError(f"--choose {choice}: no node within {within_of(choice):g} of the best {selection_split()} "
                        "accuracy has a known $ per row (its task model's price is unknown, or no evaluation's cost "
                        "was tallied): --choose best picks by accuracy alone")
    return min(pool, key=rank_key(choice)) if pool else None


def describe(choice: str) -> str:
    split = selection_split()
    if choice == "best":
        return (f"the best rule: the highest {split} accuracy among nodes that finished the full evaluation, ties to "
                f"the lower {split} normalized MAE, then the cheaper per row")
    if choice.startswith(WITHIN):
        return (f"the {choice} rule: the lowest $ per row among nodes that finished the full evaluation with a "
                f"{split} accuracy within {within_of(choice):g} of the best's (point estimates; intervals below)")
    if choice == "paper":
        return (f"the paper's rule: the lowest {split} normalized MAE of any node with one, "
                "ties to the earlier node")
    return (f"the full_eval rule: the lowest {split} normalized MAE among nodes that finished the full "
            f"evaluation, ties to the higher {split} accuracy, then the earlier node")


def ranking_lines(candidates: list[Candidate], choice: str) -> list[str]:
    """The top nodes of the eligible ones by each metric, as the command prints them; for the rules that rank by
    cost, of every fully evaluated node (those beyond D too) and by $ per row as well."""
    costs = choice not in ("paper", "full_eval")
    split, choice = selection_split(), "full_eval" if costs else choice
    pool = eligible(candidates, choice)

    def row(c: Candidate) -> str:
        accuracy = _number(c.scores[split].get(ACCURACY))
        shown = "n/a" if accuracy is None else f"{accuracy:.3f}"
        cost = f", {usd_text(c.cost.usd if c.cost else None)} a row" if costs else ""
        return (f"  node {c.node_id:>8} (generation {c.generation}): {split} normalized MAE "
                f"{_mae(c):.3f}, {split} accuracy {shown}{cost}")

    by_mae = sorted(pool, key=rank_key(choice))[:TOP_N]
    then = (lambda c: c.position) if choice == "paper" else rank_key(choice)  # the reference: a stable sort
    by_acc = sorted(pool, key=lambda c: (-_accuracy(c), then(c)))[:TOP_N]
    lines = [f"top {len(by_mae)} by {split} normalized MAE (lower is better):", *map(row, by_mae),
             f"top {len(by_acc)} by {split} accuracy:", *map(row, by_acc)]
    if costs:
        by_cost = sorted(pool, key=lambda c: (_usd(c), -_accuracy(c), c.position))[:TOP_N]
        lines += [f"top {len(by_cost)} by $ per row of grading (the task agent's calls; lower is better):",
                  *map(row, by_cost)]
    return lines


def cost_lines(candidates: list[Candidate], choice: str, chosen: Candidate) -> list[str]:
    """Why the rules that rank by cost chose `chosen`: its accuracy with its interval and its $ per row, and
    the best's beside it (with how many times as much a row the best costs)."""
    if choice != "best" and not choice.startswith(WITHIN):
        return []
    split, best = selection_split(), min(eligible(candidates, "best"), key=rank_key("best"))

    def facts(c: Candidate) -> str:
        band = f" {interval_text(*c.interval)}" if c.interval else ""
        return (f"{split} accuracy {_accuracy(c):.3f}{band}, "
                f"{usd_text(c.cost.usd if c.cost else None)} a row")

    lines = [f"  node {chosen.node_id}: {facts(chosen)}"]
    if best is not chosen:
        ratio = _usd(best) / _usd(chosen) if 0 < _usd(chosen) < math.inf and _usd(best) < math.inf else None
        times = f" ({ratio:.1f}x as much a row)" if ratio else ""
        lines.append(f"  the best, node {best.node_id}: {facts(best)}{times}")
    return lines
