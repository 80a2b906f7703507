"""Runs and groups of runs as `python -m apps.analyze` reads them: read only, records checked.

A group is what one argument names: a run folder (run.json), a folder of replicates
(group.json) or a folder whose subfolders are runs, each read as a stranger's (archive/run_folder.py).
A run's scores are the loop's selection scores (archive.store.run_score), so nothing here
reads test except the final test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from archive.eval_store import EvalStore
from archive.experiments import FINAL_TEST, RUN_NAME, read_final_test, read_group
from archive.promotion import row_scores
from archive.records import Node, RunRecord
from archive.run_folder import ledger_of, read_run_record
from archive.store import Archive, ScoreRule, observed_best, observed_rule, observed_sizes, run_score
from services.errors import UserError

__all__ = ["Group", "Run", "load_groups", "read_run_record"]


@dataclass
class Run:
    name: str
    path: Path
    record: RunRecord
    nodes: dict[str, Node]

    @classmethod
    def load(cls, path: Path, name: str) -> Run:
        run = cls(name, path, read_run_record(path), Archive(path).nodes)
        if run.score(run.nodes.get("initial")) is None:
            raise UserError(f"{path}: the initial node has no score, so no improvement can be measured from it")
        return run

    @property
    def seed(self) -> int | None:
        seed = self.record.config.get("loop", {}).get("seed")
        return seed if type(seed) is int else None

    @property
    def generations(self) -> int:
        return max(n.generation for n in self.nodes.values())

    @cached_property
    def sizes(self) -> dict[str, tuple[str, int]]:
        """Per domain: the split the loop selects on and its full size."""
        return observed_sizes(self.record.domains, list(self.nodes.values()))

    @cached_property
    def rule(self) -> ScoreRule:
        """How the run scored staged-only nodes; the initial node counts with its measured score (a run that
        selected as the paper does scaled it down, which would make every improvement look larger)."""
        return replace(observed_rule(self.record.config.get("loop"), self.record.domains),
                                   scale_initial=False)

    def score(self, node: Node | None) -> float | None:
        return run_score(node, self.sizes, self.rule) if node is not None and node.valid_parent else None

    def curve(self, last: int) -> list[float]:
        """The best score reached by each generation 0..last."""
        best_at: dict[int, float] = {}
        for node in self.nodes.values():
            score = self.score(node)
            if score is not None:
                best_at[node.generation] = max(score, best_at.get(node.generation, score))
        curve, best = [], self.score(self.nodes["initial"])
        if best is None:
            raise UserError(f"{self.path}: the initial node has no score")
        for generation in range(last + 1):
            best = max(best, best_at.get(generation, best))
            curve.append(best)
        return curve

    def imp(self, k: int) -> float:
        return self.curve(k)[k] - self.curve(0)[0]

    @cached_property
    def _best(self) -> Node:
        try:
            best = observed_best(list(self.nodes.values()), self.sizes, self.path, self.record.config.get("loop"),
                                 self.record.config.get("search"))
        except ValueError as e:
            raise UserError(f"{self.path / 'run.json'}: {e}") from None
        if best is None:
            raise UserError(f"{self.path}: no node has a score, not even the initial one")
        return best

    def best(self) -> Node:
        """The node the run calls best, by its own loop.best_choice (the initial node has a score)."""
        return self._best

    def test_scores(self) -> tuple[str, dict[str, float | None]] | None:
        """The final test's chosen node and its mean score per node tested ("initial" and the chosen one;
        None where a domain could not be scored), or None when the run has no final test."""
        record = read_final_test(self.path / FINAL_TEST)
        if record is None:
            return None
        means: dict[str, float | None] = {}
        for node_id, domains in record.nodes.items():
            scores = [e.score for e in domains.values() if e.score is not None]
            means[node_id] = sum(scores) / len(scores) if scores and len(scores) == len(domains) else None
        return record.best, means

    def spend(self) -> dict[str, tuple[float, int]]:
        """Dollars and tokens per role: the ledger's, or the nodes' records where it has none."""
        spend: dict[str, tuple[float, int]] = {}
        for row in ledger_of(self.path).spend():
            usd, tokens = spend.get(row["role"], (0.0, 0))
            spend[row["role"]] = (usd + row["cost_usd"], tokens + row["prompt_tokens"] + row["completion_tokens"])
        if not spend:
            for node in self.nodes.values():
                for role, usd in node.cost_usd.items():
                    old = spend.get(role, (0.0, 0))
                    spend[role] = (old[0] + usd, old[1] + node.tokens.get(role, 0))
        return spend

    def rows_of(self, node: Node) -> dict[str, dict[str, float]]:
        """Per domain: the node's per-row scores on the split it is selected on, from its report."""
        from domains.registry import get_domain

        store, found = EvalStore(self.path), {}
        for domain, (split, _) in self.sizes.items():
            key = node.eval_key(domain, split)
            report = store.report(key) if key and node.full_eval.get(domain) else None
            rows = row_scores(report, get_domain(domain).score_key) if report else None
            if rows:
                found[f"{domain}/{split}"] = rows
        return found


@dataclass
class Group:
    name: str
    runs: list[Run]


def _runs_in(path: Path) -> list[Run]:
    """The runs a folder holds: itself, its group's replicates, or its subfolders that are runs."""
    if path.is_symlink() or not path.is_dir():
        raise UserError(f"{path}: not a folder (a run folder or a folder of runs)")
    if (path / "run.json").is_file():
        return [Run.load(path, path.name)]
    group = read_group(path)
    if group is not None:
        missing = [r for r in group["runs"] if not (path / r / "run.json").is_file()]
        if missing:
            raise UserError(f"{path}: replicate {missing[0]} has not started: "
                            f"python -m run_optimization --resume_from {path}")
        return [Run.load(path / r, r) for r in group["runs"]]
    runs = [Run.load(p, p.name) for p in sorted(path.iterdir())
            if p.is_dir() and not p.is_symlink() and (p / "run.json").is_file()]
    if not runs:
        raise UserError(f"{path}: not a run (no run.json) nor a folder of runs")
    return runs


def load_groups(paths: list[str], labels: list[str]) -> list[Group]:
    named: dict[str, list[Run]] = {}
    for item in [p for text in labels for p in text.split(",") if p.strip()]:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"--label {item!r}: expected NAME=PATH")
        named.setdefault(name.strip(), []).extend(_runs_in(Path(path.strip()).resolve()))
    for text in paths:
        path = Path(text).resolve()
        if path.name in named:
            raise UserError(f"two groups are named {path.name!r}: name them with --label NAME=PATH")
        named[path.name] = _runs_in(path)
    if not named:
        raise UserError("name at least one run or group of runs (a folder under outputs/)")
    for name, runs in named.items():
        if len({r.path for r in runs}) != len(runs):
            raise UserError(f"group {name!r} holds the same run twice")
        if any(RUN_NAME.fullmatch(r.name) for r in runs) and len({r.path.parent for r in runs}) > 1:
            for r in runs:  # replicates of several groups in one: keep their names apart
                r.name = f"{r.path.parent.name}/{r.name}"
    return [Group(name, runs) for name, runs in named.items()]
