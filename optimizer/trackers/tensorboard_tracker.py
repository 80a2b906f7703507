"""The run in TensorBoard: event files in RUN/tracking/tensorboard (`tensorboard --logdir` reads
them), written by tensorboardX. Per node its numbers as scalars at the node's generation and its
record and patch as text; the config once as text; the best node so far as best/ scalars and a
`best_node` text. A resumed run writes a new event file into the same folder, which TensorBoard
reads as one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.config import TrackingConfig

from tensorboardX import SummaryWriter


def _block(text: str) -> str:
    """Text shown as it is: TensorBoard renders its text as Markdown, so each line is indented as code."""
    return "\n".join("    " + line for line in text.splitlines())


class TensorboardTracker:
    name = "tensorboard"

    def __init__(self, run_dir: Path, config: TrackingConfig) -> None:
        self.folder = run_dir / "tracking" / "tensorboard"
        self.writer: SummaryWriter  # opened by start

    def start(self, kept: dict, run_record: dict) -> dict:
        self.writer = SummaryWriter(logdir=str(self.folder), flush_secs=30)
        if not kept.get("started"):
            self.writer.add_text("run.json", _block(json.dumps(run_record, indent=1)), 0)
        self.writer.flush()
        return {"started": True, "logdir": str(self.folder)}

    def node(self, step: int, node_id: str, metrics: dict[str, float], record: dict, patch: str) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.writer.add_text(f"nodes/{node_id}", _block(json.dumps(record, indent=1)), step)
        self.writer.add_text(f"nodes/{node_id}/patch", _block(patch), step)
        self.writer.flush()

    def best(self, step: int, node_id: str, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.writer.add_text("best_node", node_id, step)
        self.writer.flush()

    def finish(self, ended: str) -> None:
        self.writer.close()
