"""The run in MLflow: one MLflow run per run of the loop, its config as parameters and run.json as
an artifact; per node, its numbers as metrics at the node's generation and its record and patch as
artifacts under nodes/<id>/; the best node so far as best/ metrics and the `best_node` tag.

Its store is `tracking.mlflow_uri`, else MLFLOW_TRACKING_URI, else a file store in RUN/tracking/mlruns
(`mlflow ui --backend-store-uri` reads it); its experiment `tracking.experiment` when set, else
MLFLOW_EXPERIMENT_NAME, else hyperagents (environment.py). MLflow 3 keeps file stores in maintenance
and refuses them unless MLFLOW_ALLOW_FILE_STORE is set: the one store mlflow-skinny can write without
a server, so the variable is set for this process. A resumed run continues the MLflow run whose id it kept."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.config import TrackingConfig

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from optimizer.trackers.content import flat_params
from optimizer.trackers.environment import chosen

PARAM_CHARS = 500  # a parameter's value as MLflow keeps it (its limit is 6000)
BATCH = 1000  # MLflow takes at most 1000 metrics in one call


class MlflowTracker:
    name = "mlflow"

    def __init__(self, run_dir: Path, config: TrackingConfig) -> None:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # read when the client opens its store
        self.uri = chosen(self.name, config, "mlflow_uri").value or (run_dir / "tracking" / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment, self.run_name = str(chosen(self.name, config, "experiment").value), run_dir.name
        self.run_id = ""  # set by start

    def start(self, kept: dict, run_record: dict) -> dict:
        if kept.get("run_id") and kept.get("uri") == self.uri:  # a store changed since: a run of its own there
            self.run_id = kept["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return kept
        found = self.client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
        tags = {"tags": ",".join(map(str, run_record.get("tags") or []))} if run_record.get("tags") else None
        self.run_id = self.client.create_run(experiment_id, run_name=str(run_record.get("name") or self.run_name),
                                             tags=tags).info.run_id
        params = {"domains": ",".join(run_record.get("domains", [])), "sandbox_backend": run_record.get("backend"),
                  **flat_params(run_record.get("config", {}))}
        items = [Param(k[:250], str(v)[:PARAM_CHARS]) for k, v in params.items()]
        for at in range(0, len(items), 100):  # MLflow's limit of parameters per call
            self.client.log_batch(self.run_id, params=items[at:at + 100])
        self.client.log_text(self.run_id, json.dumps(run_record, indent=1), "run.json")
        return {"run_id": self.run_id, "uri": self.uri}

    def node(self, step: int, node_id: str, metrics: dict[str, float], record: dict, patch: str) -> None:
        self._metrics(metrics, step)
        self.client.log_text(self.run_id, json.dumps(record, indent=1), f"nodes/{node_id}/node.json")
        self.client.log_text(self.run_id, patch, f"nodes/{node_id}/patch.diff")

    def best(self, step: int, node_id: str, metrics: dict[str, float]) -> None:
        self._metrics(metrics, step)
        self.client.set_tag(self.run_id, "best_node", node_id)

    def finish(self, ended: str) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if ended == "finished" else "KILLED")

    def _metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        items = [Metric(name, value, now, step) for name, value in metrics.items()]
        for at in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, metrics=items[at:at + BATCH])
