"""The Ray executor: every sandbox of a run on a node of a Ray cluster, the controller here.

    with connect(config, gateway.unix_socket):                 # once per run, after the gateway started
        with open_sandbox(config.sandbox, workspace, mounts, gateway.unix_socket, "ray") as box:
            box.run([box.python, "-c", "print(1)"], env)         # runs on a worker node

The controller (archive, run repository, ledger, gateway, provider keys) stays in this
process. A `RaySandbox` is a sandbox like the others to its caller; behind it a host
actor (services/sandbox/ray_host.py) on a worker node keeps a sandbox of that node's own
backend. The controller sends the workspace and the read-only mounts as data; after each
`run` and at `close` it takes the workspace and the writable mounts back as data (regular
files, paths checked, within `sandbox.disk_mb`) into its local folders, so everything that
reads them afterwards (the change's capture, transcripts) reads local files as before.
Code inside reaches the gateway through the relay and the run's gateway channel
(services/sandbox/ray_channel.py). A lost node raises SandboxLost.

Ray is imported only here, when the executor is ray (`pip install -e ".[ray]"`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import astuple, fields
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from services.config import Config, SandboxConfig
from services.errors import MachineDown, UserError
from services.sandbox.base import RunResult, Sandbox, SandboxClosed, SandboxLost
from services.sandbox.ray_files import checked, less, quota_of, read_to_send, replace_tree
from services.workspace import EVOLVABLE_PATHS

if TYPE_CHECKING:
    from ray import ObjectRef

    from services.sandbox.ray_process import RemoteProcess

# Ray CPUs a sandbox asks for: a token, so it is placed only on nodes that have CPUs (not on a head
# started with --num-cpus 0) and SPREAD over them, while how many run at once is bounded by --parallel,
# not by Ray's accounting. A generation opens its evaluation's sandbox while its meta agent's runs, and a
# grader's while its evaluation's is open: were each to hold a whole CPU, generations holding one
# sandbox each and waiting for a second could wait for each other forever once a node is lost.
HOST_CPUS = 0.01
HEAD_RESOURCE = "node:__internal_head__"  # what Ray's head node has (ray._common.constants calls it so)
HOST_THREADS = 32  # calls a host actor serves at once (a command's two stream reads wait there)
PLACEMENT_WARN_S = 60.0  # a sandbox still not placed on a node after this is told on the console
CLIENT_TRIES = 3  # ray:// connections tried when the head's Ray Client server was too slow to take the driver
DISK_CHECK_S = 2.0  # how often the node is asked whether it stopped the sandbox for what it wrote
_lock = threading.Lock()
_connection = None  # the run's Connection while `connect` is entered
_started_here = False  # whether this process started the Ray instance it uses (then it stops it)


def _ray(address: str | None):  # noqa: ANN202 - the module: pyright reads its functions' types, ModuleType hides them
    """Ray, initialized for `address` (None: a private instance on this machine's loopback)."""
    global _started_here
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a private instance sends no usage report
        if address is None:  # Ray's switch for a one-machine instance: everything on 127.0.0.1
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise UserError('--executor ray needs Ray: pip install -e ".[ray]"') from None
    with _lock:
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False} if address is None else {}
            for attempt in range(1, CLIENT_TRIES + 1):
                try:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, **options)
                    break
                except (ConnectionError, RuntimeError, ValueError) as e:
                    if attempt < CLIENT_TRIES and _client_server_was_slow(address, e):
                        ray.shutdown()
                        time.sleep(5 * attempt)
                        continue
                    where = f"at {address}" if address else "on this machine"
                    hint = ("; if the head's ray_client_server.err says 'SpecificServer startup failed', start "
                            "the head with GRPC_ENABLE_FORK_SUPPORT=0" if _client_server_was_slow(address, e) else "")
                    raise UserError(f"cannot connect to a Ray cluster {where}: {str(e).splitlines()[0][:300]}{hint}") \
                        from None
            _started_here = True
    return ray


def _client_server_was_slow(address: str | None, error: Exception) -> bool:
    """Ray Client's server (ray://) starts a server process for each driver: on a busy head it may
    not start within the head's RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S (30 s), and with gRPC's
    fork handlers on (a head started without GRPC_ENABLE_FORK_SUPPORT=0) it sometimes dies at once."""
    return bool(address and address.startswith("ray://") and "Initialization failure from server" in str(error))


def describe_cluster(config: SandboxConfig) -> str:
    """For the run's plan: the backend each node runs, where the cluster is and what it has to
    run sandboxes on (its nodes with CPUs). Connects to the cluster (or starts the private one)."""
    ray = _ray(config.ray_address)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    cpus = sum(n["Resources"]["CPU"] for n in nodes)
    gcs = ray.get_runtime_context().gcs_address
    where = f"cluster at {gcs}" if config.ray_address else f"a private Ray instance at {gcs}"
    if cpus < HOST_CPUS:
        raise UserError(f"the Ray {where} has no node with a CPU to run sandboxes on")
    return f"{config.backend} on each node; {where}: {len(nodes)} node{'s' * (len(nodes) != 1)}, {cpus:g} CPUs"


class Connection:
    """A run's hold on the cluster: how to make sandbox hosts, and the gateway channel they use."""

    def __init__(self, ray: ModuleType, config: Config, gateway_socket: Path | None) -> None:
        from services.sandbox.ray_channel import Channel, Mailbox
        from services.sandbox.ray_host import SandboxHost

        self.ray = ray
        self.host_class = ray.remote(num_cpus=HOST_CPUS, max_concurrency=HOST_THREADS, max_restarts=0,
                                     scheduling_strategy="SPREAD")(SandboxHost)
        gw = config.gateway
        # A request may wait for the gateway's retries of a provider call, each up to its timeout.
        answer_timeout = (gw.max_retries + 1) * (gw.request_timeout_s + gw.backoff_max_s) + 60
        self.mailbox = self.channel = self.door = None
        if gateway_socket is not None:
            # On the head node, whose loss ends the cluster anyway: not on the node this driver
            # attached to, which may be a worker node that the run must survive losing.
            on_head = {HEAD_RESOURCE: 0.001}
            self.mailbox = ray.remote(num_cpus=0, max_restarts=0, resources=on_head)(Mailbox).remote()
            self.channel = Channel(self.mailbox, gateway_socket, answer_timeout).start()
            self.door = (self.mailbox, gw.max_request_mb, answer_timeout)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.stop()
        if self.mailbox is not None:
            self.ray.kill(self.mailbox)


@contextlib.contextmanager
def connect(config: Config, gateway_socket: Path | None) -> Iterator[Connection]:
    """Hold the Ray cluster for a run: sandboxes opened meanwhile with backend "ray" run on its
    nodes and reach the gateway behind `gateway_socket` through it. Stops the Ray instance on
    exit when it started it."""
    global _connection, _started_here
    ray = _ray(config.sandbox.ray_address)
    connection = Connection(ray, config, gateway_socket)
    _connection = connection
    try:
        yield connection
    finally:
        _connection = None
        connection.close()
        if _started_here:
            _started_here = False
            ray.shutdown()


class RaySandbox(Sandbox):
    """A sandbox on a Ray worker node, driven from here."""

    name = "ray"
    relay_per_command = False  # the node's own sandbox starts the relay
    measures_disk = False  # the folders here are copies `pull` writes: the node's sandbox measures what it writes

    def __post_init__(self) -> None:
        super().__post_init__()
        self._python = sys.executable
        self._host = None
        self._ray = None
        self._dirty = False  # commands ran since the workspace was last taken back
        self.lost = False
        self.node_id = ""
        self.where = "a Ray node"
        self.remote_backend = ""
        self.dropped: dict[str, str] = {}  # what the last pull left out of the workspace, and why

    @property
    def python(self) -> str:
        return self._python

    def open(self) -> RaySandbox:
        from services.sandbox.ray_host import trusted_digest

        connection = _connection
        if connection is None:
            raise RuntimeError("the Ray executor is not connected (services.sandbox.ray_backend.connect)")
        if any(m.writable and not m.source.is_dir() for m in self.mounts):
            raise ValueError("a Ray sandbox's writable mounts must be folders")
        self._ray = connection.ray
        quota = quota_of(self.config)
        workspace = read_to_send(self.workspace, quota, "the workspace")
        quota = less(quota, workspace)
        mounts = []
        for m in self.mounts:
            files = read_to_send(m.source, quota, f"the mount {m.target}")
            quota = less(quota, files)
            mounts.append((m.target, m.writable, files))
        self._host = connection.host_class.remote(self.config)
        opening = self._host.open.remote(workspace, mounts, connection.door if self.gateway_socket else None)
        if not self._ray.wait([opening], timeout=PLACEMENT_WARN_S)[0]:
            print(f"waiting for the Ray cluster to place a sandbox (each asks for {HOST_CPUS:g} CPU of a node "
                  "with CPUs): are its worker nodes up?", file=sys.stderr, flush=True)
        info = self._result(opening, "open")
        self._python, self.remote_backend = str(info["python"]), str(info["backend"])
        self.node_id, self.where = str(info["node_id"]), f"{info['backend']} on {info['host']}"
        if info["trusted"] != trusted_digest():
            raise UserError(f"the Ray node {info['host']} runs another version of this project (its inside/ "
                            "differs from this machine's): install the same commit on every node")
        return self

    def call(self, method: str, *args: object) -> Any:  # noqa: ANN401 - what the host's `method` returns
        """A call to the host actor; SandboxLost when its node is gone (SandboxClosed once closed)."""
        host = self._host
        if host is None:
            raise SandboxClosed("the sandbox is closed")
        return self._result(getattr(host, method).remote(*args), method)

    def _result(self, pending: ObjectRef, method: str) -> Any:  # noqa: ANN401 - as `call`
        ray = self._ray
        assert ray is not None  # set when the sandbox opened, before any call
        try:
            return ray.get(pending)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause
            if isinstance(cause, (SandboxClosed, UserError)):
                raise type(cause)(str(cause)) from None
            if isinstance(cause, MachineDown):  # the node's disk short of its reserve as the sandbox opened there
                raise MachineDown(f"{cause.reason}, on {self.where}"[:1000]) from None
            raise RuntimeError(f"the sandbox host ({self.where}) failed in {method}: {cause!r}"[:1000]) from None
        except ray.exceptions.RayError as e:
            self.lost = True
            if self._closed:
                raise SandboxClosed("the sandbox is closed") from None
            raise SandboxLost(f"the Ray node running this sandbox ({self.where}) is gone: "
                              f"{type(e).__name__}") from None

    def adopt(self, tree: Path) -> None:
        """Files the controller put into the workspace (or a writable mount) after open: send them."""
        tree = Path(tree).resolve()
        targets = [m.target for m in self.mounts if m.writable and m.source == tree]
        if tree != self.workspace and not targets:
            raise ValueError(f"{tree} is neither the workspace nor a writable mount of this sandbox")
        target = None if tree == self.workspace else targets[0]
        self.call("push", target, read_to_send(tree, quota_of(self.config), "the folder"))

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> RemoteProcess:
        from services.sandbox.ray_process import RemoteProcess

        self._dirty = True
        ident, pid = self.call("popen", argv, env, cwd)
        return RemoteProcess(self, ident, pid, argv)

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 60.0,
            input: str | None = None, cwd: str | None = None, output_cap: int | None = None) -> RunResult:
        """Run to completion on the node (Sandbox.run there), then take the workspace back."""
        if self._closed:
            raise SandboxClosed("the sandbox is closed")
        self._dirty = True
        cap = int(output_cap if output_cap is not None else self.config.output_cap_mb * 2**20)
        result = self.call("run", list(argv), dict(env or {}), timeout, input, cwd, cap)
        result = _run_result(result, cap)
        self.pull()
        return result

    def pull(self) -> None:
        """The remote workspace and writable mounts into the local folders, as data."""
        quota = quota_of(self.config)
        data = self.call("pull", astuple(quota), EVOLVABLE_PATHS)
        self._dirty = False
        if type(data) is not dict:
            return
        workspace = checked(data.get("workspace"), quota)
        quota = less(quota, workspace)
        replace_tree(self.workspace, workspace)
        dropped = data.get("dropped")
        self.dropped = {str(k)[:300]: str(v)[:300] for k, v in list(dropped.items())[:1000]} if type(
            dropped) is dict else {}
        mounts = data.get("mounts")
        mounts = mounts if isinstance(mounts, dict) else {}
        for m in self.mounts:
            if m.writable:
                files = checked(mounts.get(m.target), quota)
                quota = less(quota, files)
                replace_tree(m.source, files)

    def _watch_disk(self) -> None:
        """The node's sandbox measures what it writes; ask it now and then whether it stopped it."""
        while not self._stop_watch.wait(DISK_CHECK_S):
            try:
                capped = self.call("disk_capped")
            except RuntimeError:  # SandboxClosed too
                return
            if capped:
                self.disk_capped = str(capped)[:300]
                return

    def close(self) -> None:
        if self._closed:
            return
        try:
            super().close()  # kills the commands still running
            if self._host is not None and not self.lost:
                with contextlib.suppress(RuntimeError):  # SandboxClosed: the node is gone
                    if self._dirty:
                        self.pull()
                    self.call("close")
        finally:
            host, self._host = self._host, None
            if host is not None and self._ray is not None:
                self._ray.kill(host)


def _run_result(value: object, cap: int) -> RunResult:
    """A RunResult from the fields a host sent back, each checked; output cut to the cap."""
    names = [f.name for f in fields(RunResult)]
    if type(value) is not dict or set(value) != set(names):
        raise RuntimeError("the sandbox host sent back no result of its command")
    code, out, err, seconds, timed_out, capped_out, disk = (value[n] for n in names)
    if not (code is None or type(code) is int) or type(out) is not str or type(err) is not str:
        raise RuntimeError("the sandbox host sent back a malformed result")
    return RunResult(code, out[:cap], err[:cap], float(seconds), bool(timed_out), bool(capped_out),
                     None if disk is None else str(disk)[:300])
