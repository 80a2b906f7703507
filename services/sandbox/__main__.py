"""Sandbox tools: `python -m services.sandbox check` (each backend's state here and why, and the one
a run takes; exit 2 when none works; with docker it also removes the containers of runs that were
killed; then which coding agents each working backend can run) and
`python -m services.sandbox build-image [--full] [--tag T]`."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from importlib import metadata

import docker
import docker.errors
import requests

from services.cli_parser import ArgumentParser
from services.config import SandboxConfig
from services.errors import UserError, exit_on_user_error
from services.render import console
from services.sandbox.docker_backend import connect
from services.sandbox.image import build_full_image, build_host_python_image


def build_image(full: bool, tag: str) -> None:
    client = connect(SandboxConfig())
    started = time.monotonic()
    try:
        image_id = build_full_image(client, tag) if full else build_host_python_image(client, tag)
    except docker.errors.BuildError as e:
        raise UserError(f"building {tag} failed: {e.msg.strip().splitlines()[-1]}") from None
    except (docker.errors.DockerException, requests.RequestException) as e:
        raise UserError(f"building {tag} failed: {(str(e).strip().splitlines() or [type(e).__name__])[0]}") from None
    finally:
        client.close()
    print(f"built {tag} ({image_id}) in {time.monotonic() - started:.2f} s")


def docker_state(config: SandboxConfig) -> str:
    """docker's line of `check`: whether an engine answers, where, and whether the image is there."""
    from services.sandbox.backends import DEFAULT_DOCKER_SOCKET, no_docker_socket

    problem = no_docker_socket(config)
    if problem:
        return f"not usable: {problem}"
    try:
        client = connect(config, timeout=2)
    except UserError as e:
        return f"not usable: {e}"
    where = config.docker_host or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_DOCKER_SOCKET}"
    try:
        client.images.get(config.docker_image)
        image = f"image {config.docker_image} present"
    except docker.errors.ImageNotFound:
        image = (f"image {config.docker_image} missing, built when first used "
                 "(or now: python -m services.sandbox build-image)")
    except (docker.errors.DockerException, requests.RequestException) as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        image = f"image {config.docker_image} unknown: {why}"
    finally:
        client.close()
    return f"works: an engine answers at {where}; {image}"


def bwrap_state() -> str:
    from services.sandbox.bwrap import bwrap_unavailable

    problem = bwrap_unavailable()
    if problem:
        return f"not usable: {problem}"
    return f"works: its self-test ran python in a sandbox ({shutil.which('bwrap')})"


def ray_state() -> str:
    """ray's line of `check`: an executor rather than a sandbox, so only whether its extra is installed."""
    if importlib.util.find_spec("ray") is None:
        return 'not installed (pip install -e ".[ray]"): needed only for --executor ray'
    return (f"installed (ray {metadata.version('ray')}): --executor ray runs each sandbox on a node of a Ray cluster, "
            "in that node's own backend (no cluster is contacted here)")


def check() -> None:
    """Print each backend's state and why, which coding agents each working one runs, then the one a run
    takes (`auto`), or why none works (then exit 2). Taking docker removes the containers whose creating
    process is gone, each named on stderr."""
    from services.sandbox.backends import choose_local_backend

    config = SandboxConfig()
    states = {"docker": docker_state(config), "bwrap": bwrap_state(),
              "none": "no sandbox: agent code runs as a plain subprocess with your files and network; "
                      "taken only when asked for (--sandbox none)",
              "ray": ray_state()}
    for name, state in states.items():
        print(console(f"{name:<7} {state}"), flush=True)
    from services.coding_agents.check import agent_lines

    working = [name for name in ("docker", "bwrap") if states[name].startswith("works")]
    for line in agent_lines(working, config):  # which coding agents each working backend runs
        print(console(f"meta agent {line}"), flush=True)
    try:
        backend, _ = choose_local_backend(config)
    except UserError:  # neither docker nor bwrap: each said why above
        raise UserError("no sandbox works here (see above): start a Docker engine or install bubblewrap; "
                        "--sandbox none runs agent code unsandboxed") from None
    print(f"a run takes {backend} (--sandbox auto: docker when an engine answers, else bwrap; never none)")


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m services.sandbox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="which sandbox backend works on this machine (with docker: also remove "
                                      "the containers of killed runs)")
    build = commands.add_parser("build-image", help="build the docker backend's image")
    build.add_argument("--full", action="store_true",
                       help="a self-contained image from the Dockerfile (needs a registry); "
                            "default: an almost empty image that borrows the host's /usr and Python")
    build.add_argument("--tag", default=SandboxConfig().docker_image, help="image name (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.command == "check":
        check()
    else:
        build_image(args.full, args.tag)


if __name__ == "__main__":
    exit_on_user_error(main)
