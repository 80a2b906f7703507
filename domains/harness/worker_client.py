"""The task agent's worker process in a sandbox: how it is started, what it sees, when it is replaced.

A worker's environment holds no provider key, only the gateway's address and a session
key; its sandbox holds the agent's code (a workspace, a single file, or an installed
package mounted read-only) and a writable folder for transcripts, never a data set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import queue
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from domains.harness.worker_pipe import WorkerProcess
from inside.worker import is_file_path
from services.config import PROJECT_ROOT, Config
from services.errors import AgentFailed, UserError
from services.fsutil import make_folder
from services.sandbox import Mount, Sandboxes
from services.workspace import EVOLVABLE_PATHS, copy_evolvable

if TYPE_CHECKING:
    from services.gateway import Gateway
    from services.sandbox.base import Sandbox

AGENT_PACKAGES = "/opt/agent_packages"  # where installed agent packages are mounted inside


def worker_env(sandbox: Sandbox, gateway_url: str, gateway_key: str, models: tuple[str, ...] = ()) -> dict:
    """The worker's whole environment: no provider key, only the gateway's address and key.

    `models` are the models agent code there calls; those that answer usably only under
    constrained decoding (local ones) are named in AGENT_STRUCTURED_MODELS for agent/llm.py.
    """
    from services.local_model import is_local

    env = sandbox.base_env()
    env["AGENT_STRUCTURED_MODELS"] = ",".join(m for m in models if is_local(m))
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        AGENT_GATEWAY_URL=gateway_url,
        AGENT_GATEWAY_KEY=gateway_key,
        # Unchanged litellm/openai code that ignores our variables still lands on the gateway.
        OPENAI_API_BASE=gateway_url,
        OPENAI_BASE_URL=gateway_url,
        OPENAI_API_KEY=gateway_key,
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def worker_mounts(transcripts: Path) -> list:
    """What a sandboxed worker needs besides the trusted scripts every sandbox has: its transcripts
    folder, writable."""
    return [Mount(transcripts, "/out/agent_evals", writable=True)]


def is_project_agent(agent_path: str) -> bool:
    """Whether the agent is this project's evolvable code (or a file that may import it)
    rather than an installed package such as `proofgrader`."""
    return is_file_path(agent_path) or agent_path.split(".")[0] in EVOLVABLE_PATHS


def agent_mounts(agent_path: str, workspace: Path) -> tuple[list, Path | None]:
    """What the sandbox needs mounted to load the agent: (mounts, the agent's .py file or None).

    A module in the workspace needs nothing. A `.py` file is mounted alone, read-only;
    an installed package (e.g. `proofgrader`) has its folder mounted read-only under
    AGENT_PACKAGES, since an editable install points outside anything the sandbox sees.
    """
    if is_file_path(agent_path):
        path = Path(agent_path).resolve()
        if not path.is_file():
            raise UserError(f"--agent_path {agent_path}: no such file")
        return [Mount(path, f"/opt/agent_file/{path.name}")], path
    top = agent_path.split(".")[0]
    if (workspace / top).is_dir() or (workspace / f"{top}.py").is_file():
        return [], None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not (spec.origin or spec.submodule_search_locations):
        raise UserError(f"--agent_path {agent_path}: no module {top!r} in the workspace or installed")
    locations = list(spec.submodule_search_locations or [])
    source = Path(locations[0]) if locations else Path(spec.origin or "")
    return [Mount(source, f"{AGENT_PACKAGES}/{source.name}")], None


class AgentWorker:
    """The task agent's worker in a sandbox: started on first use, replaced when it dies,
    and reusable across evaluations of one agent (the loop runs every split of a node
    through one, so the agent's imports are paid once, not once per split)."""

    def __init__(self, sandbox: Sandbox, agent_path: str, model: str, config: Config, gateway: Gateway, node: str,
                 role: str, transcripts: Path, log_path: Path, pythonpath: Sequence[str] = (),
                 also_import: Sequence[str] = ()) -> None:
        self.sandbox = sandbox
        self.agent_path = agent_path
        self.model = model
        self.config = config
        self.gateway = gateway
        self.log_path = log_path
        self.transcripts = transcripts
        self.pythonpath = list(pythonpath)
        self.also_import = list(also_import)  # MODULE:NAME entry points that must load too
        self.key = gateway.new_session(node, role, [model], sandbox=sandbox)  # refused once the sandbox closed
        self.results: queue.Queue = queue.Queue()
        self.proc: WorkerProcess | None = None

    def start(self) -> None:
        """Start a fresh worker; returns once it loaded the agent."""
        if getattr(self.sandbox, "disk_capped", None):  # its watch kills whatever starts there now
            raise AgentFailed(f"the agent's sandbox was stopped for {self.sandbox.disk_capped}")
        # Here, where the first call can come: pricing the model imports litellm on the host, which the
        # harness's command overlaps with the sandbox's start (domains/harness/__main__.py).
        self.gateway.allow_models(self.model)
        self.stop()
        self._launch()
        deadline = time.monotonic() + self.config.harness.start_timeout_s
        while True:
            try:
                source, msg = self.results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise AgentFailed(f"the agent did not load within {self.config.harness.start_timeout_s:g} s "
                                f"(see {self.log_path})") from None
            if source is not self.proc:
                continue
            if msg.get("ready"):
                return
            self.stop()
            self.sandbox.check_stopped("the agent's worker")  # not the agent's failure to load
            if getattr(self.sandbox, "disk_capped", None):
                raise AgentFailed(f"the agent's sandbox was stopped for {self.sandbox.disk_capped}")
            raise AgentFailed(msg.get("fatal") or f"the worker exited before loading the agent (see {self.log_path})")

    def _launch(self) -> None:
        box = self.sandbox
        cmd = [box.python, box.trusted_script("worker.py"), "--agent_path", self.agent_path, "--model", self.model,
               "--workers", str(self.config.harness.num_workers), "--root", box.workdir,
               "--transcripts", box.inside(self.transcripts)]
        cap = self.config.harness.max_prediction_bytes
        cmd += ["--max_prediction_bytes", str(cap)]
        cmd += [arg for entry in self.also_import for arg in ("--also_import", entry)]
        env = worker_env(box, box.gateway_url or self.gateway.url, self.key, (self.model,))
        if self.pythonpath:
            env["PYTHONPATH"] = ":".join(self.pythonpath)
        log_cap = int(self.config.sandbox.output_cap_mb * 2**20)
        self.proc = WorkerProcess(box.popen(cmd, env), self.log_path, log_cap, self.results, cap, box)

    def ensure_started(self) -> None:
        if self.proc is None or not self.proc.alive():
            self.start()

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
            self.proc = None


@contextlib.contextmanager
def open_agent_worker(config: Config, agent_path: str, model: str, gateway: Gateway, out_dir: Path, *,
                      sandboxes: Sandboxes,
                      node: str, role: str, workspace: Path | None = None,
                      transcripts: Path | None = None) -> Iterator[AgentWorker]:
    """An AgentWorker for `agent_path` in a sandbox of its own, stopped and removed on exit.

    The sandbox's workspace is `workspace`, the agent's code only; without one, the project's
    evolvable paths are copied into a temporary workspace (left empty for an installed agent
    such as `proofgrader`, so nothing of ours may shadow or complete it): no data set or
    label is ever in reach. Transcripts go to `transcripts` (default `out_dir/agent_evals`): the
    one folder the agent may write, so the caller keeps it apart from its records. The worker's
    log goes to `out_dir/worker.log`.
    """
    with contextlib.ExitStack() as stack:
        if workspace is None:
            workspace = Path(tempfile.mkdtemp(prefix="hyperagents-ws-"))
            stack.callback(shutil.rmtree, workspace, ignore_errors=True)
            if is_project_agent(agent_path):
                copy_evolvable(PROJECT_ROOT, workspace)
        mounts, agent_file = agent_mounts(agent_path, workspace)
        installed = bool(mounts) and agent_file is None
        transcripts = transcripts or out_dir / "agent_evals"
        make_folder(transcripts)
        box = stack.enter_context(sandboxes.open(workspace, mounts + worker_mounts(transcripts)))
        worker = AgentWorker(box, box.inside(agent_file) if agent_file else agent_path, model, config, gateway, node,
                             role, transcripts, out_dir / "worker.log",
                             [AGENT_PACKAGES] if box.isolated and installed else [])
        stack.callback(worker.stop)
        yield worker
