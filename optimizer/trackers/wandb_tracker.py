"""The run in Weights & Biases: one W&B run per run of the loop, its config as the run's config;
per node a history row (its numbers, with `generation` as the x axis, since parallel generations
come back out of order) and its record and patch as files of the run (nodes/<id>/); the best node
so far as best/ numbers and the summary's `best_node`.

Offline by default: W&B keeps everything in RUN/tracking/wandb/offline-run-*/, and `wandb sync`
uploads it later. Its mode, project and team are `tracking.wandb_mode`, `tracking.experiment` and
`tracking.wandb_entity` where set, else WANDB_MODE, WANDB_PROJECT and WANDB_ENTITY, else offline,
hyperagents and the account's default; its files go to WANDB_DIR when that is set (environment.py).
A resumed run continues the W&B run of the id it kept (a new offline folder of the same id, which
`wandb sync` joins). W&B does not take over the console (console off): the
run's own lines stay as they are."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.config import TrackingConfig

import wandb

from optimizer.trackers.environment import chosen


class WandbTracker:
    name = "wandb"

    def __init__(self, run_dir: Path, config: TrackingConfig) -> None:
        self.config, self.run_dir = config, run_dir
        self.folder = Path(os.environ["WANDB_DIR"]) if os.environ.get("WANDB_DIR") else run_dir / "tracking"
        self.mode, self.project, self.entity = (chosen(self.name, config, key).value
                                                for key in ("wandb_mode", "experiment", "wandb_entity"))
        self.run: wandb.Run  # opened by start

    def start(self, kept: dict, run_record: dict) -> dict:
        run_id = kept.get("run_id") or secrets.token_hex(8)  # W&B takes any id of letters and digits
        self.folder.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", silent=True, disable_git=True, save_code=False,
                                  x_save_requirements=False, x_disable_stats=True, x_disable_machine_info=True)
        self.run = wandb.init(project=self.project, entity=self.entity, id=run_id,
                              name=str(run_record.get("name") or self.run_dir.name),
                              tags=[str(t)[:64] for t in run_record.get("tags") or []],  # W&B's limit
                              dir=str(self.folder),
                              mode=self.mode,  # type: ignore[arg-type] - offline|online from the config, or WANDB_MODE's
                              resume="allow", settings=settings, reinit="create_new",
                              config={"domains": run_record.get("domains", []), "backend": run_record.get("backend"),
                                      **run_record.get("config", {})})
        self.run.define_metric("generation")
        self.run.define_metric("*", step_metric="generation")
        self._file("run.json", json.dumps(run_record, indent=1))
        return {"run_id": run_id}

    def node(self, step: int, node_id: str, metrics: dict[str, float], record: dict, patch: str) -> None:
        self.run.log({**metrics, "generation": step})
        self._file(f"nodes/{node_id}/node.json", json.dumps(record, indent=1))
        self._file(f"nodes/{node_id}/patch.diff", patch)

    def best(self, step: int, node_id: str, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, "generation": step})
        self.run.summary["best_node"] = node_id

    def finish(self, ended: str) -> None:
        self.run.finish(exit_code=0 if ended == "finished" else 1)

    def _file(self, name: str, text: str) -> None:
        """A file of the run: what W&B keeps in the run's files folder goes up with it."""
        path = Path(self.run.dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.run.save(str(path), base_path=self.run.dir, policy="end")
