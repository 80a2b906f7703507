"""Starting a run from another run's node (`--initial_from RUN[:NODE]`, `--transfer meta|all`).

The paper's transfer experiment takes the meta agent a run evolved (on one domain) and
starts a new run with it on another, the task agent reset to the initial one: does a
better meta agent make a better search? `--transfer meta` keeps the node's meta agent and
everything else the meta agent runs on (`agent/`, the selector, the ensemble) and takes the
task agent fresh from `--initial_agent`; `--transfer all` keeps the whole node. The new
run's initial node is that code; run.json records where it came from.

The source run is read as any run is: its records checked, its commit read from its own
repository as data (`RunRepo.export`), never a path or file of the source folder copied.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from archive.promotion import BestChoice
from archive.records import NODE_ID
from archive.run_folder import repository_read
from archive.store import Archive
from services.errors import UserError
from services.workspace import EVOLVABLE_PATHS, RunRepo, discard

TRANSFERS = ("meta", "all")
TASK_AGENT = "task_agent"


@dataclass(frozen=True)
class Transfer:
    run: str  # the source run's folder
    node: str  # its node the new run starts from
    commit: str  # that node's commit in the source run's repository
    keep: str  # meta | all

    def apply(self, workspace: Path) -> None:
        """Replace the evolvable code in `workspace` (a fresh copy of the project's) with the
        source node's: all of it, or all but the task agent."""
        kept = [p for p in EVOLVABLE_PATHS if self.keep == "all" or p != TASK_AGENT]
        with tempfile.TemporaryDirectory(prefix="hyperagents-transfer-") as scratch:
            with repository_read(Path(self.run), self.commit):
                RunRepo(Path(self.run) / "repo").export(self.commit, Path(scratch))
            for name in kept:
                discard(workspace / name)
                if (Path(scratch) / name).exists():
                    (Path(scratch) / name).rename(workspace / name)

    def to_dict(self) -> dict:
        return asdict(self)


def split_spec(spec: str) -> tuple[str, str | None]:
    """RUN[:NODE] as (RUN, NODE or None); a colon that is not followed by a node id belongs to the path."""
    folder, _, node_id = spec.rpartition(":")
    return (folder, node_id) if folder and NODE_ID.fullmatch(node_id) else (spec, None)


def pick_transfer(run_dir: Path, node_id: str | None, domains: list, full_sizes: dict[str, int], keep: str,
                  where: str, choice: BestChoice = BestChoice()) -> Transfer:
    """The node of the (checked) source run to start from: `node_id`, by default its best node
    (as the source run chose it: `choice` is its loop.best_choice)."""
    archive = Archive(run_dir)
    if node_id is not None:
        node = archive.nodes.get(node_id)
        if node is None:
            known = ", ".join(n.node_id for n in archive.ordered()[:20])
            raise UserError(f"{where}: the run has no node {node_id!r} (it has {known or 'none'})")
    else:
        node = archive.best(domains, full_sizes, choice)
        if node is None:
            raise UserError(f"{where}: the run has no valid node to start from")
    if node.commit is None:
        raise UserError(f"{where}: node {node.node_id} has no code of its own ({node.status})")
    return Transfer(str(run_dir), node.node_id, node.commit, keep)
