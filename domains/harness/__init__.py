"""The evaluation harness: run a task agent over a domain's rows, through the gateway.

    from domains.harness import open_agent_worker, run_split
    result = run_split(domain, rows, worker, out_dir)   # -> SplitResult

    python -m domains.harness --domain imo_grading --subset _filtered_100_train \
        --num_samples 10 --run_id initial_imo_grading_filtered_100_train_0

journal.py keeps what finished, worker_pipe.py reads the worker's hostile output,
worker_client.py starts and replaces workers, scheduler.py hands them rows, split.py is
one run into one folder, grading.py grades a run with an installed grader agent, and
__main__.py is the command line.
"""

from domains.harness.grading import GRADINGS, grade_run
from domains.harness.journal import JOURNAL, PREDICTIONS, Journal, write_predictions
from domains.harness.rows import load_rows
from domains.harness.split import SplitResult, run_folder, run_split
from domains.harness.worker_client import (
    AGENT_PACKAGES,
    AgentWorker,
    agent_mounts,
    is_project_agent,
    open_agent_worker,
    worker_env,
    worker_mounts,
)
from domains.harness.worker_pipe import ProtocolError, WorkerProcess

__all__ = ["AGENT_PACKAGES", "GRADINGS", "JOURNAL", "PREDICTIONS", "AgentWorker", "Journal", "ProtocolError",
           "SplitResult", "WorkerProcess", "agent_mounts", "grade_run", "is_project_agent", "load_rows",
           "open_agent_worker", "run_folder", "run_split", "worker_env", "worker_mounts", "write_predictions"]
