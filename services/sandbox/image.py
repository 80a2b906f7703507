"""The docker backend's image: an almost empty one that borrows the host's Python, or a full one.

The host-python image needs no registry: a root filesystem of empty folders, `bin ->
usr/bin` style links and an /etc/passwd, imported in well under a second. The sandbox
then binds the host's /usr and Python installation read-only at their own paths, so
agent code runs the very interpreter and packages of the host. It is labelled
`hyperagents.python=host`; a full image built from the Dockerfile beside this module
names its own interpreter in that label instead.
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image
from docker.utils import parse_repository_tag

from services.errors import UserError

PYTHON_LABEL = "hyperagents.python"  # "host", or the image's own interpreter
DOCKERFILE = Path(__file__).with_name("Dockerfile")

_DIRS = {  # folder -> mode; mount points and the writable places of the sandbox
    "usr": 0o755, "etc": 0o755, "root": 0o755, "home": 0o755, "home/sandbox": 0o1777,
    "tmp": 0o1777, "workspace": 0o755, "run": 0o755, "run/gateway": 0o755, "opt": 0o755,
    "opt/hyperagents": 0o755, "proc": 0o555, "sys": 0o555, "dev": 0o755,
    "sbin": 0o755,  # a folder, not a link into the read-only /usr: docker mounts its init there
}
_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin/ldconfig": "/usr/sbin/ldconfig"}
_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                  "nobody:x:65534:65534:nobody:/home/sandbox:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
}


def host_python_rootfs() -> bytes:
    """The tar of the host-python image's root filesystem."""
    buffer = io.BytesIO()
    mtime = time.time()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, mode in _DIRS.items():
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, mtime
            tar.addfile(info)
        for name, target in _LINKS.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, mtime
            tar.addfile(info)
        for name, text in _FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, mtime
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build_host_python_image(client: docker.DockerClient, tag: str) -> str:
    """Import the host-python image under `tag`; its id. Needs a merged-/usr host
    (/bin a link to usr/bin), as the image links /bin, /lib and /lib64 into the bound /usr."""
    if any(Path("/", name).exists() and Path("/", name).resolve() != Path("/usr", name).resolve()
           for name in ("bin", "lib", "lib64", "sbin")):
        raise UserError("this host keeps programs outside /usr (no merged /usr): build the full image instead")
    repository, version = parse_repository_tag(tag)
    client.api.import_image_from_data(host_python_rootfs(), repository=repository, tag=version or "latest",
                                      changes=[f"LABEL {PYTHON_LABEL}=host", "WORKDIR /workspace"])
    return _id(client.images.get(tag))


def build_full_image(client: docker.DockerClient, tag: str) -> str:
    """Build the Dockerfile's image (needs a registry for its base image); its id."""
    # A build step downloads packages, so it uses the host's network: with the engine's
    # default bridge switched off there is no other, and only the Dockerfile's trusted
    # steps run in it. Sandbox containers never get a network.
    image, _ = client.images.build(fileobj=io.BytesIO(DOCKERFILE.read_bytes()), tag=tag, rm=True,
                                   forcerm=True, network_mode="host")
    return _id(image)


def _id(image: Image) -> str:
    assert image.id, "the engine returned an image without an id"
    return image.id
