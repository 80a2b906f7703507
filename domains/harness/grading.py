"""Grading predictions with an installed grader agent (imo_proof: the `proofgrader` package).

The grader is a package installed outside every workspace the meta agent edits; it runs in
a sandbox of its own on an empty workspace, with its package mounted read-only, over the
rows of the grading domain built from the predictions. This is what a graded domain's
scorer (domains/scoring.py) asks its caller for, the loop and `python -m domains.report` alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from domains.harness.rows import load_rows
from domains.harness.split import SplitResult, run_folder, run_split
from domains.harness.worker_client import open_agent_worker
from services.config import Config

if TYPE_CHECKING:  # a Domain is only passed through here: no need to import pandas with it
    from domains.base import Domain
    from services.gateway import Gateway
    from services.sandbox import Sandboxes

GRADINGS = "gradings"  # the grading run's folder, beside the predictions it grades


def grade_run(grading: Domain, grader_agent: str, predictions: Path, config: Config, gateway: Gateway, *,
              sandboxes: Sandboxes,
              model: str | None = None, node: str | None = None, show_progress: bool = True,
              transcripts: Path | None = None, role: str | None = None) -> SplitResult:
    """Run `grader_agent`, the agent of domain `grading`, over the predictions.csv at `predictions`,
    into `gradings/` beside it, resuming what is there.

    `model` defaults to the grading domain's role, and so does `role`, the ledger's role of the calls
    (a held-out grader's are booked apart); `node` books them to a node of a loop's run, else to "eval".
    `transcripts` is where the grader, hostile agent code too, may write (default `gradings/agent_evals`;
    the loop passes a folder under `untrusted/`).
    """
    folder = predictions.parent
    out = folder / GRADINGS
    rows = load_rows(grading, proofs=folder)
    label = " ".join(x for x in (f"node {node}" if node else None, grading.name) if x)
    with run_folder(out), open_agent_worker(config, grader_agent, config.resolve_model(model or grading.model_role),
                                            gateway, out, sandboxes=sandboxes, node=node or "eval",
                                            role=role or grading.model_role, transcripts=transcripts) as worker:
        return run_split(grading, rows, worker, out, label=label, show_progress=show_progress,
                         asked={"subset": "", "proofs_dname": str(folder), "num_samples": -1})
