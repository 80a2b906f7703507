"""Sandboxes for model-written code: one interface, backends docker, bwrap and none.

    sandboxes = Sandboxes(config.sandbox, choose_backend(config.sandbox), gateway.unix_socket)
    with sandboxes.open(workspace, mounts) as box:
        result = box.run([box.python, "-c", "print(1)"], env, timeout=30)

A run binds its `Sandboxes` once (the settings, the backend chosen at launch, the gateway's socket);
each step then names only what is its own, the workspace and the mounts.

`auto` picks docker when an engine answers, else bubblewrap after a self-test, and
otherwise stops with a clear error: it never falls back to running code unsandboxed.
With `sandbox.executor: ray` every sandbox runs on a node of a Ray cluster instead, in
that node's own backend (services/sandbox/ray_backend.py); the caller sees the same
interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from services.config import SandboxConfig
from services.sandbox.backends import choose_local_backend, open_local
from services.sandbox.base import Mount, RunResult, Sandbox, SandboxClosed, SandboxLost, close_all

__all__ = ["Mount", "RunResult", "Sandbox", "SandboxClosed", "SandboxLost", "Sandboxes", "choose_backend",
           "close_all", "open_sandbox"]


def choose_backend(config: SandboxConfig) -> str:
    """The backend to use: the configured one after checking it works here; `auto` resolved;
    `ray` with the Ray executor (each node resolves its own)."""
    return choose_backend_why(config)[0]


def choose_backend_why(config: SandboxConfig, dry_run: bool = False) -> tuple[str, str | None]:
    """`choose_backend`, and a note for the run's plan: why `auto` did not take docker, that its
    image would be built (`dry_run`: then nothing is started, built or removed), or where the Ray
    cluster is and what it has (None when there is nothing to say)."""
    if config.executor == "ray":
        if dry_run:
            where = (f"the cluster at {config.ray_address}" if config.ray_address
                     else "a private Ray instance, which the run would start")
            return "ray", f"{config.backend} on each node of {where} (not contacted in a dry run)"
        from services.sandbox.ray_backend import describe_cluster

        return "ray", describe_cluster(config)
    return choose_local_backend(config, dry_run)


def open_sandbox(config: SandboxConfig, workspace: str | Path, mounts: Sequence[Mount] = (),
                 gateway_socket: Path | None = None, backend: str | None = None) -> Sandbox:
    """An unopened sandbox of `backend` (default: `choose_backend(config)`); use it with `with`."""
    backend = backend or choose_backend(config)
    if backend == "ray":
        from services.sandbox.ray_backend import RaySandbox

        return RaySandbox(Path(workspace), config, list(mounts), gateway_socket)
    return open_local(config, Path(workspace), list(mounts), gateway_socket, backend)


@dataclass(frozen=True)
class Sandboxes:
    """How one run opens its sandboxes, bound once: the sandbox settings, the backend chosen for the run
    and the socket of the gateway its agents call (None: a sandbox that calls no model)."""

    config: SandboxConfig
    backend: str
    gateway_socket: Path | None = None

    def open(self, workspace: str | Path, mounts: Sequence[Mount] = (), *, model_calls: bool = True) -> Sandbox:
        """An unopened sandbox on `workspace` with `mounts`; use it with `with`. `model_calls=False`: the
        code inside reaches no gateway (a parent selector, a check)."""
        return open_sandbox(self.config, workspace, mounts, self.gateway_socket if model_calls else None,
                            self.backend)
