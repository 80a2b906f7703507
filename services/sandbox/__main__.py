"""Sandbox tools: `python -m services.sandbox check` (which backend works here; with docker it
also removes the containers of runs that were killed) and
`python -m services.sandbox build-image [--full] [--tag T]`."""

from __future__ import annotations

import argparse
import time

import docker
import docker.errors
import requests

from services.config import SandboxConfig
from services.errors import UserError, exit_on_user_error
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


def check() -> None:
    """Say which backend `auto` takes on this machine, or why none works (then exit 2). Taking docker
    removes the containers whose creating process is gone, each named on stderr."""
    from services.sandbox import choose_backend_why

    backend, why = choose_backend_why(SandboxConfig())
    print(f"sandbox {backend}: works here" + (f" ({why})" if why else ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.sandbox", description=__doc__)
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
