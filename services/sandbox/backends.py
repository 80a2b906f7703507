"""The backends of this machine: which one works here, and opening one.

`auto` picks docker when an engine answers, else bubblewrap after a self-test, and
otherwise stops with a clear error: it never falls back to running code unsandboxed.
A Ray worker node resolves its own backend here too (services/sandbox/ray_host.py),
so this module knows nothing of executors.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from services.config import SandboxConfig
from services.errors import UserError
from services.sandbox.base import Sandbox

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"  # where Docker's client looks when DOCKER_HOST is not set
NONE_WARNING = ("warning: --sandbox none: agent code runs as a plain subprocess with your files and network; "
                "use it only for code you trust")


def choose_local_backend(config: SandboxConfig, dry_run: bool = False) -> tuple[str, str | None]:
    """The configured backend after checking it works on this machine, `auto` resolved; and a note:
    why `auto` did not take docker, or (`dry_run`) that docker's image would be built first. Docker
    chosen for real: the containers of killed runs are removed and a missing image is built; in a
    dry run nothing is started, built or removed."""
    from services.sandbox.bwrap import bwrap_unavailable

    wanted = config.backend
    if wanted == "none":
        return "none", None
    docker_problem = None
    if wanted in ("docker", "auto"):
        docker_problem = no_docker_socket(config)
        if docker_problem is None:
            from services.sandbox.docker_backend import engine_available

            docker_problem = engine_available(config)
        if docker_problem is None:
            return "docker", prepare_docker(config, dry_run)
        if wanted == "docker":
            raise UserError(f"sandbox docker: {docker_problem}")
    bwrap_problem = bwrap_unavailable()
    if bwrap_problem is None:
        return "bwrap", docker_problem and f"auto chose bwrap because docker is not usable: {docker_problem}"
    if wanted == "bwrap":
        raise UserError(f"sandbox bwrap: {bwrap_problem}")
    raise UserError(f"no sandbox works here: docker: {docker_problem}; bwrap: {bwrap_problem}. "
                    "Start a Docker engine or install bubblewrap; --sandbox none runs agent code unsandboxed")


def no_docker_socket(config: SandboxConfig) -> str | None:
    """Why no Docker engine can answer, when that is plain without asking one (no `docker_host`,
    no DOCKER_HOST, no default socket), else None: then Docker's client, which takes up to a
    second to import, is not loaded on a machine without Docker."""
    if config.docker_host or os.environ.get("DOCKER_HOST") or os.path.exists(DEFAULT_DOCKER_SOCKET):
        return None
    return f"no Docker engine answers at the default socket: {DEFAULT_DOCKER_SOCKET} does not exist"


def prepare_docker(config: SandboxConfig, dry_run: bool = False) -> str | None:
    """Docker about to be used: remove the containers killed runs left, and build the registry-free
    image (a fraction of a second) when the configured one is missing. With `dry_run` only look:
    the note "its image would be built first" when it is missing, else None."""
    import time

    import docker
    import docker.errors

    from services.sandbox.docker_backend import connect
    from services.sandbox.image import build_host_python_image
    from services.sandbox.leftovers import remove_dead_containers

    client = connect(config)
    try:
        if not dry_run:
            remove_dead_containers(client)
        client.images.get(config.docker_image)
    except docker.errors.ImageNotFound:
        if dry_run:
            return "its image would be built first"
        started = time.monotonic()
        build_host_python_image(client, config.docker_image)
        print(f"built the sandbox image {config.docker_image} in {time.monotonic() - started:.2f} s "
              "(the host's Python, bound read-only)", file=sys.stderr)
    finally:
        client.close()
    return None


def open_local(config: SandboxConfig, workspace: Path, mounts: list, gateway_socket: Path | None,
               backend: str) -> Sandbox:
    """An unopened sandbox of a backend of this machine (docker, bwrap or none)."""
    if backend == "none":
        print(NONE_WARNING, file=sys.stderr)
    return LOCAL_BACKENDS[backend]()(Path(workspace), config, list(mounts), gateway_socket)


# Each backend's class, imported when chosen (docker's client library is slow to import). The
# config accepts these names and "auto" (services.config.SANDBOX_BACKENDS; tests/test_layers.py).
def _docker() -> type[Sandbox]:
    from services.sandbox.docker_backend import DockerSandbox
    return DockerSandbox


def _bwrap() -> type[Sandbox]:
    from services.sandbox.bwrap import BwrapSandbox
    return BwrapSandbox


def _none() -> type[Sandbox]:
    from services.sandbox.local import LocalSandbox
    return LocalSandbox


LOCAL_BACKENDS: dict[str, Callable[[], type[Sandbox]]] = {"docker": _docker, "bwrap": _bwrap, "none": _none}
