"""Sandboxes for model-written code: one interface, backends docker, bwrap and none.

    with open_sandbox(config.sandbox, workspace, mounts, gateway_socket) as box:
        result = box.run([box.python, "-c", "print(1)"], env, timeout=30)

`auto` picks docker when an engine answers, else bubblewrap after a self-test, and
otherwise stops with a clear error: it never falls back to running code unsandboxed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from services.config import SandboxConfig
from services.errors import UserError
from services.sandbox.base import Mount, RunResult, Sandbox, SandboxClosed, SandboxLost, close_all

__all__ = ["Mount", "RunResult", "Sandbox", "SandboxClosed", "SandboxLost", "choose_backend", "close_all",
           "open_sandbox"]

NONE_WARNING = ("warning: --sandbox none: agent code runs as a plain subprocess with your files and network; "
                "use it only for code you trust")


def choose_backend(config: SandboxConfig) -> str:
    """The backend to use: the configured one after checking it works here; `auto` resolved."""
    return choose_backend_why(config)[0]


def choose_backend_why(config: SandboxConfig) -> tuple[str, str | None]:
    """`choose_backend`, and why `auto` did not take docker (None when it did, or was not asked)."""
    from services.sandbox.bwrap import bwrap_unavailable

    wanted = config.backend
    if wanted == "none":
        return "none", None
    docker_problem = None
    if wanted in ("docker", "auto"):
        from services.sandbox.docker_backend import engine_available

        docker_problem = engine_available(config)
        if docker_problem is None:
            ensure_docker_image(config)
            return "docker", None
        if wanted == "docker":
            raise UserError(f"sandbox docker: {docker_problem}")
    bwrap_problem = bwrap_unavailable()
    if bwrap_problem is None:
        return "bwrap", docker_problem and f"auto chose bwrap because docker is not usable: {docker_problem}"
    if wanted == "bwrap":
        raise UserError(f"sandbox bwrap: {bwrap_problem}")
    raise UserError(f"no sandbox works here: docker: {docker_problem}; bwrap: {bwrap_problem}. "
                    "Start a Docker engine or install bubblewrap; --sandbox none runs agent code unsandboxed")


def ensure_docker_image(config: SandboxConfig) -> None:
    """Build the registry-free image (a fraction of a second) when the configured one is missing."""
    import time

    import docker

    from services.sandbox.docker_backend import connect
    from services.sandbox.image import build_host_python_image

    client = connect(config)
    try:
        client.images.get(config.docker_image)
    except docker.errors.ImageNotFound:
        started = time.monotonic()
        build_host_python_image(client, config.docker_image)
        print(f"built the sandbox image {config.docker_image} in {time.monotonic() - started:.2f} s "
              "(the host's Python, bound read-only)", file=sys.stderr)
    finally:
        client.close()


def open_sandbox(config: SandboxConfig, workspace: str | Path, mounts: list[Mount] = (),
                 gateway_socket: Path | None = None, backend: str | None = None) -> Sandbox:
    """An unopened sandbox of `backend` (default: `choose_backend(config)`); use it with `with`."""
    backend = backend or choose_backend(config)
    if backend == "none":
        print(NONE_WARNING, file=sys.stderr)
        from services.sandbox.local import LocalSandbox as cls
    elif backend == "bwrap":
        from services.sandbox.bwrap import BwrapSandbox as cls
    else:
        from services.sandbox.docker_backend import DockerSandbox as cls
    return cls(Path(workspace), config, list(mounts), gateway_socket)
