"""What a run is, fixed once when it opens and read by every step of it: the RunContext.

The loop and its collaborators (optimizer/beginning.py's Beginnings, optimizer/meta_step.py's MetaStep,
optimizer/screening.py's Screen, optimizer/evaluation.py's Evaluator, the held-out grader, the final test)
each take the context and the few things of the run that change (the archive, the repository, the event
bus), instead of the whole Loop: what a step may read is its signature.

Everything here is computed from the config and the domains once: the rows of a full evaluation of each
domain, the selection score's rule, the best-node choice, the models, and the `Sandboxes` bound to the
backend chosen at launch and to the gateway's socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from archive.promotion import BestChoice
from archive.store import ScoreRule
from services.coding_agents import coding_agent, is_coding_agent
from services.config import Config, LoopConfig
from services.sandbox import Sandboxes

if TYPE_CHECKING:
    from archive.records import Node
    from archive.store import Archive
    from domains.base import Domain
    from services.coding_agents.base import CodingAgent
    from services.gateway import Gateway


@dataclass(frozen=True)
class RunContext:
    run_dir: Path
    config: Config
    domains: list[Domain]
    gateway: Gateway
    sandboxes: Sandboxes
    full_sizes: dict[str, int]  # domain -> rows of a full evaluation of its selection split
    score_rule: ScoreRule
    best_choice: BestChoice
    task_model: str
    meta_model: str  # models.meta's first (the one a generation without a bandit uses)
    meta_models: tuple[str, ...]  # the bandit's arms: one model, no bandit
    coding_agent: CodingAgent | None = None  # models.meta_agent when a coding agent; None: the workspace's code

    @classmethod
    def open(cls, run_dir: Path, config: Config, domains: list[Domain], gateway: Gateway, backend: str) -> RunContext:
        """The context of the run in `run_dir`, whose sandboxes run on `backend` and call `gateway`."""
        from optimizer.evaluation import split_rows

        sizes = {d.name: split_rows(d, d.selection_split, config.loop.eval_samples) for d in domains}
        name = config.models.meta_agent
        return cls(run_dir, config, list(domains), gateway, Sandboxes(config.sandbox, backend, gateway.unix_socket),
                   sizes, ScoreRule.of(config.loop, domains), BestChoice.of(config.loop, config.search),
                   config.resolve_model("task"), config.resolve_model("meta"), tuple(config.meta_models()),
                   coding_agent(name) if is_coding_agent(name) else None)

    @property
    def loop(self) -> LoopConfig:
        """The run's loop settings (config.loop)."""
        return self.config.loop

    def best(self, archive: Archive, upto: int | None = None) -> Node | None:
        """The run's best node among those of generations up to `upto` (all when None), by loop.best_choice."""
        return archive.best(self.domains, self.full_sizes, self.best_choice, upto, self.score_rule)

    @property
    def workspaces(self) -> Path:
        """Where the run's plain folders of agent code are, one a sandbox (removed when it closes)."""
        return self.run_dir / "workspaces"
