"""The docker backend: one container per sandbox, every command a `docker exec` in it.

The container has no network (only `lo`), no capabilities, a read-only root, private
tmpfs /tmp and HOME, and memory, pids, CPU, file-size and CPU-time limits. Everything
runs as a non-root user (nobody when we are root, else our own uid). The container's
main process is the trusted relay when the sandbox has a gateway socket (the gateway
makes its socket connectable by anyone), so one relay serves every command. Docker's
init (tini) is PID 1 so that orphans are reaped: a zombie keeps its pid, and enough of
them would fill the pids limit.

The engine must run on this machine: a command is killed by its host pid (see
docker_exec), and the relay's readiness is read from the container's /proc/PID/net/tcp.

An engine that stops answering once it answered this process (its daemon stopped), the image or a
container of ours removed under a run, are this machine's failure (MachineDown), never a command's
result: the run stops, and a resume redoes what was in flight. Before the first sandbox, a missing
engine or image is a UserError (set-up).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import requests
from docker.models.containers import Container
from docker.models.images import Image
from docker.types import Mount as DockerMount
from docker.types import Ulimit

from services.config import SandboxConfig
from services.errors import MachineDown, UserError
from services.sandbox.base import (
    GATEWAY_DIR,
    RELAY_PORT,
    TRUSTED_DIR,
    WORKSPACE,
    Sandbox,
    hidden_core_paths,
    python_paths,
)
from services.sandbox.docker_exec import DockerProcess, in_container, start_exec
from services.sandbox.image import PYTHON_LABEL
from services.sandbox.leftovers import LABEL, creator_labels  # noqa: F401 (LABEL: what finds our containers)

SANDBOX_UID = 65534  # nobody: who runs agent code when we are root
HOST_PATHS = ("/usr", "/etc/ssl", "/etc/alternatives", "/etc/ld.so.cache")  # what the host's Python needs
_ANSWERED: set[str] = set()  # engines (where) and images (tags) this process used: one gone since is the machine's


def where_of(config: SandboxConfig) -> str:
    """The engine `config` reaches, as messages name it."""
    return config.docker_host or os.environ.get("DOCKER_HOST") or "the default socket"


def connect(config: SandboxConfig, timeout: float = 60) -> docker.DockerClient:
    """A client of the configured engine that has answered a ping, or a UserError."""
    where = where_of(config)
    try:
        if config.docker_host:
            client = docker.DockerClient(base_url=config.docker_host, timeout=timeout)
        else:
            client = docker.from_env(timeout=timeout)  # type: ignore[arg-type] - its stub says int; requests takes float
        client.ping()
    except (docker.errors.DockerException, requests.RequestException, OSError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"no Docker engine answers at {where}: {reason[:200]}") from None
    return client


def engine_available(config: SandboxConfig) -> str | None:
    """None when a Docker engine answers within about 2 s, else why not (one line)."""
    try:
        connect(config, timeout=2).close()
    except UserError as e:
        return str(e)
    return None


ENGINE_GONE_S = 10.0  # how long an engine that answered before has to answer again: a stopped one refuses at once


def engine_down(config: SandboxConfig) -> MachineDown | None:
    """MachineDown when the engine of `config` no longer answers, else None: asked after a call to it failed,
    so the failure is told apart from a command's or a container's own (a busy engine is given time)."""
    try:
        connect(config, timeout=ENGINE_GONE_S).close()
    except UserError as e:
        return MachineDown(f"the Docker engine stopped during the run: {e}")
    return None


@contextlib.contextmanager
def engine_calls(config: SandboxConfig) -> Iterator[None]:
    """Within: a call to the engine that failed because the engine is gone is MachineDown."""
    try:
        yield
    except (docker.errors.DockerException, requests.RequestException, OSError) as e:
        if not isinstance(e, docker.errors.NotFound) and (down := engine_down(config)) is not None:
            raise down from e
        raise


class DockerSandbox(Sandbox):
    name = "docker"
    relay_per_command = False  # the container's main process is the relay for all its commands

    def __post_init__(self) -> None:
        super().__post_init__()
        self._client: docker.DockerClient | None = None
        self._container_name = f"hyperagents-{uuid.uuid4().hex[:16]}"  # to remove it even if create is interrupted
        self._container_id = ""
        self._init_pid = 0  # the container's first process (docker's init): it lives as long as the container
        self._python = sys.executable
        self._handed_over: list[Path] = []  # trees chowned to the sandbox user, to give back at close
        self._spawned: weakref.WeakSet[DockerProcess] = weakref.WeakSet()  # a streaming one is kept by its thread

    @property
    def python(self) -> str:
        return self._python

    def open(self) -> DockerSandbox:
        where = where_of(self.config)
        try:
            self._client = connect(self.config)
        except UserError as e:
            if where in _ANSWERED:
                raise MachineDown(f"the Docker engine stopped during the run: {e}") from None
            raise
        _ANSWERED.add(where)
        with engine_calls(self.config):
            return self._open()

    def _open(self) -> DockerSandbox:
        image = self._image()
        mounts = [_bind(self.workspace, WORKSPACE, writable=True)]
        mounts += [_bind(m.source, m.target, m.writable) for m in self.all_mounts()]
        if image.labels[PYTHON_LABEL] == "host":
            mounts += [_bind(Path(path), path, writable=False) for path in [*HOST_PATHS, *python_paths()]]
            mounts += [DockerMount(path, None, type="tmpfs") if os.path.isdir(path) else
                       _bind(Path(os.devnull), path, writable=False) for path in hidden_core_paths()]
        else:
            self._python = image.labels[PYTHON_LABEL]
        self._hand_over([self.workspace, *(m.source for m in self.mounts if m.writable)])
        if self.gateway_socket:
            command = [self._python, f"{TRUSTED_DIR}/relay.py", "--socket",
                       f"{GATEWAY_DIR}/{self.gateway_socket.name}", "--port", str(RELAY_PORT)]
        else:
            command = ["sleep", "infinity"]
        config = self.config
        assert self._client is not None and image.id, "the sandbox is not open"
        container = self._client.containers.run(
            image.id, command, name=self._container_name, detach=True, init=True, user=self._user,
            labels=creator_labels(), network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            read_only=True, working_dir=WORKSPACE, mounts=mounts,
            tmpfs={path: f"size={config.tmp_mb}m,mode=1777,exec" for path in ("/tmp", "/home/sandbox")},
            mem_limit=f"{config.memory_mb}m", memswap_limit=f"{config.memory_mb}m", pids_limit=config.pids,
            nano_cpus=int(config.cpus * 1e9),
            ulimits=[Ulimit(name="fsize", soft=config.file_size_mb * 2**20, hard=config.file_size_mb * 2**20),
                     Ulimit(name="cpu", soft=config.cpu_seconds, hard=config.cpu_seconds)])
        self._container_id = container.id or ""
        container.reload()
        if container.status != "running":
            logs = container.logs(tail=3).decode(errors="replace").strip().replace("\n", " | ")
            raise RuntimeError(f"the sandbox container stopped at once ({command[0]}): {logs or 'no output'}")
        pid = self._init_pid = container.attrs["State"]["Pid"]
        if not in_container(pid, self._container_id):
            raise UserError("the docker backend needs the Docker engine on this machine "
                            "(it kills commands by their host pid); use sandbox.backend=bwrap")
        if self.gateway_socket:
            _wait_for_listener(pid, RELAY_PORT, container)
        return self

    def close(self) -> None:
        try:
            super().close()
        finally:
            with engine_calls(self.config):
                self._tear_down()

    def check_stopped(self, what: str) -> None:
        """As Sandbox's (the host closed it), and, once the container ended, MachineDown when the engine went
        away (which stops its containers) or removed ours: no agent can do either (it reaches no engine).
        A container that ended while the engine answers is its agent's doing (its relay killed). Cheap while
        the container runs (a read of /proc): the harness asks before it keeps each row, since a row that
        met the relay's end is answered before the worker dies with it."""
        super().check_stopped(what)
        if _running(self._init_pid, self._container_id):
            return
        if (down := engine_down(self.config)) is not None:
            raise down
        assert self._client is not None, "the sandbox is open"
        try:
            self._client.api.inspect_container(self._container_id)
        except docker.errors.NotFound:
            raise MachineDown(f"{what}: its container {self._container_name} was removed during the run") from None

    def _tear_down(self) -> None:
        client, self._client = self._client, None
        try:
            if client is not None:
                _remove(client, self._container_name)
        finally:
            for proc in list(self._spawned):
                proc.abandon()
            try:
                self._give_back()
            finally:
                if client is not None:
                    client.close()

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> DockerProcess:
        # `docker exec` adds PATH, HOSTNAME and HOME to what it is given: `env -i` gives exactly `env`.
        command = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        assert self._client is not None, "the sandbox is not open"
        api = self._client.api
        with engine_calls(self.config):
            exec_id = api.exec_create(self._container_id, command, stdin=True, stdout=True, stderr=True,
                                      workdir=cwd, user=self._user)["Id"]
            sock, pending = start_exec(api, exec_id)
        proc = DockerProcess(api, exec_id, self._container_id, sock, pending, argv, lambda: engine_down(self.config))
        self._spawned.add(proc)
        return proc

    @property
    def _user(self) -> str:
        return f"{SANDBOX_UID}:{SANDBOX_UID}" if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"

    def _image(self) -> Image:
        tag, build = self.config.docker_image, "build it with `python -m services.sandbox build-image`"
        assert self._client is not None, "the sandbox is not open"
        try:
            image = self._client.images.get(tag)
        except docker.errors.ImageNotFound:
            if f"image {tag}" in _ANSWERED:
                raise MachineDown(f"docker image {tag} was removed during the run: {build}") from None
            raise UserError(f"docker image {tag} not found: {build}") from None
        if not image.labels.get(PYTHON_LABEL):
            raise UserError(f"docker image {tag} has no {PYTHON_LABEL} label: {build}")
        _ANSWERED.add(f"image {tag}")
        return image

    def _hand_over(self, trees: list[Path]) -> None:
        """As root, let the sandbox user write the writable trees (commands run as nobody)."""
        if os.geteuid() != 0:
            return
        for tree in trees:
            self._handed_over.append(tree)
            _chown_tree(tree, SANDBOX_UID, SANDBOX_UID)

    def adopt(self, tree: Path) -> None:
        self._hand_over([Path(tree)])

    def _give_back(self) -> None:
        """Everything in the writable trees back to us, including what the sandbox created."""
        while self._handed_over:
            _chown_tree(self._handed_over.pop(), os.getuid(), os.getgid())


def _bind(source: Path, target: str, writable: bool) -> DockerMount:
    return DockerMount(target, str(source), type="bind", read_only=not writable)


def _running(pid: int, container_id: str) -> bool:
    """Whether host pid `pid` is a live process (not a zombie) of the container."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and in_container(pid, container_id)


def _wait_for_listener(pid: int, port: int, container: Container, timeout: float = 10.0) -> None:
    """Wait until something listens on 127.0.0.1:port in the network namespace of `pid`."""
    wanted = f"0100007F:{port:04X}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
        except OSError:
            lines = []
        if any(line.split()[1] == wanted and line.split()[3] == "0A" for line in lines):  # 0A: LISTEN
            return
        container.reload()
        if container.status != "running":
            break
        time.sleep(0.01)
    logs = container.logs(tail=3).decode(errors="replace").strip().replace("\n", " | ")
    raise RuntimeError(f"the sandbox's relay did not start listening on port {port}: {logs or 'no output'}")


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """chown a tree without following symbolic links (the sandbox may have planted some)."""
    paths = [str(root)]
    if root.is_dir() and not root.is_symlink():
        for folder, dirs, files in os.walk(root):
            paths += [os.path.join(folder, name) for name in (*dirs, *files)]
    for path in paths:
        try:
            os.lchown(path, uid, gid)
        except FileNotFoundError:
            pass


def _remove(client: docker.DockerClient, name: str) -> None:
    """Force-remove a container; an interrupt (Ctrl-C, SIGTERM) during the call is held until it is done."""
    interrupted = None
    while True:
        try:
            client.api.remove_container(name, force=True)
        except docker.errors.NotFound:
            pass
        except Exception:
            raise
        except BaseException as e:
            if interrupted is not None:
                raise
            interrupted = e
            continue
        break
    if interrupted is not None:
        raise interrupted
