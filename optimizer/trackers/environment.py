"""Where a tracker logs: a setting the command gives (a config file, --set, a flag) first, then its
library's own environment variable as that library's users set it (MLFLOW_TRACKING_URI, WANDB_MODE, ...),
then the project's default.

A setting is given when it is not null (every tracker setting's default): `wandb_mode: offline` written in a
config keeps a run offline whatever WANDB_MODE says, and with none written WANDB_MODE decides.
A handed run folder's settings never reach here on their own: a resume takes every tracker setting from
its command, refusing a folder's URI, mode or team unless the command gives it (archive/run_folder.py
GUARDED); the environment is the user's own, like the command line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from services.config import TrackingConfig

DEFAULTS = {"experiment": "hyperagents", "wandb_mode": "offline"}  # a setting given nowhere (others: None)
# Each tracker setting -> the environment variables its library reads for it, by tracker.
VARIABLES = {
    "mlflow": {"mlflow_uri": ("MLFLOW_TRACKING_URI",), "experiment": ("MLFLOW_EXPERIMENT_NAME",)},
    "wandb": {"wandb_mode": ("WANDB_MODE",), "experiment": ("WANDB_PROJECT",), "wandb_entity": ("WANDB_ENTITY",)},
}


@dataclass(frozen=True)
class Chosen:
    value: str | None
    source: str  # where it came from: the setting (tracking.mlflow_uri), a variable (MLFLOW_TRACKING_URI), default


def chosen(tracker: str, config: TrackingConfig, name: str) -> Chosen:
    """The value of tracking setting `name` for `tracker`: the config's where it is set, else the first of the
    library's variables that is set (not empty), else the default."""
    value = getattr(config, name)
    if value is not None:
        return Chosen(value, f"tracking.{name}")
    for variable in VARIABLES[tracker].get(name, ()):
        if os.environ.get(variable):
            return Chosen(os.environ[variable], variable)
    return Chosen(DEFAULTS.get(name), "default")
