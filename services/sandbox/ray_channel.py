"""The gateway channel of a Ray run: worker nodes reach the controller's gateway over Ray.

    worker node: sandbox -> relay -> Door (ray_host.py) --ask--> Mailbox actor
    controller:  Channel thread --take--> forward over HTTP to the gateway's Unix socket --answer--> Mailbox

The Mailbox is an async actor on the controller's node, handed to each sandbox host (never
looked up by name). The Channel runs in the controller's process and answers every request
with the run's own gateway, so its checks, ledger, budget and keys apply unchanged: the
provider keys never leave the controller, and nothing but the caller's session key and
the request body crosses. Many requests are in flight at once, on a pool of threads.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray
import ray.exceptions
from ray.actor import ActorHandle

from services.gateway.inbound import PROTOCOLS

THREADS = 64  # requests the controller forwards at once (an evaluation sends num_workers at a time)
TAKE_WAIT_S = 0.5  # how long one take waits for a request; the channel notices a stop this often
MAX_REPLY_BYTES = 256 * 2**20  # of one reply of the gateway
# Of the reply headers, those passed on (no cache hit: see core.py).
PASSED_HEADERS = ("retry-after", "x-gateway-cost-usd")


class Mailbox:
    """Requests from worker nodes, waiting for the controller's answer (a Ray async actor)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()

    async def ask(self, kind: str, api_key: str, body: dict | None) -> tuple[int, dict, dict]:
        """Post a request; returns the controller's (status, body, headers) once it answered."""
        future = asyncio.get_running_loop().create_future()
        ident = next(self._ids)
        self._waiting[ident] = future
        self._queue.put_nowait((ident, kind, api_key, body))
        try:
            return await future
        finally:
            self._waiting.pop(ident, None)

    async def take(self, most: int, wait_s: float) -> list:
        """Up to `most` requests, waiting up to `wait_s` for the first."""
        try:
            batch = [await asyncio.wait_for(self._queue.get(), wait_s)]
        except TimeoutError:
            return []
        while len(batch) < most and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def answer(self, ident: int, reply: tuple[int, dict, dict]) -> None:
        future = self._waiting.get(ident)
        if future is not None and not future.done():
            future.set_result(reply)


class Channel:
    """The controller's side: takes the Mailbox's requests and answers each with the gateway."""

    def __init__(self, mailbox: ActorHandle[Mailbox], gateway_socket: Path, timeout: float) -> None:
        self.mailbox = mailbox
        self.gateway_socket = str(gateway_socket)
        self.timeout = timeout
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="ray-channel")
        self._thread = threading.Thread(target=self._take, name="ray-channel", daemon=True)

    def start(self) -> Channel:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TAKE_WAIT_S + 5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _take(self) -> None:
        while not self._stop.is_set():
            try:
                batch = ray.get(self.mailbox.take.remote(THREADS, TAKE_WAIT_S))
            except ray.exceptions.RayError:
                return  # the mailbox is gone: the run is ending
            for ident, kind, api_key, body in batch:
                self._pool.submit(self._answer, ident, kind, api_key, body)

    def _answer(self, ident: int, kind: str, api_key: str, body: dict | None) -> None:
        reply = forward(self.gateway_socket, kind, api_key, body, self.timeout)
        try:
            ray.get(self.mailbox.answer.remote(ident, reply))
        except ray.exceptions.RayError:
            pass


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def forward(gateway_socket: str, kind: str, api_key: str, body: dict | None, timeout: float) -> tuple[int, dict, dict]:
    """One request to the gateway over its Unix socket, as the sandbox's relay would send it;
    the reply as (status, JSON body, the headers a caller may act on)."""
    connection = _UnixConnection(gateway_socket, timeout)
    try:
        if kind in PROTOCOLS:  # a request of one of the gateway's inbound protocols, sent to its path
            # Asked as JSON: the node's listener writes the events of a streamed answer from it.
            data = json.dumps({k: v for k, v in (body or {}).items() if k != "stream"}, ensure_ascii=False).encode()
            connection.request("POST", PROTOCOLS[kind].paths[0], data,
                               {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
        else:
            connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {api_key}"})
        response = connection.getresponse()
        raw = response.read(MAX_REPLY_BYTES + 1)
        if len(raw) > MAX_REPLY_BYTES:
            raise ValueError("a reply over the size limit")
        answer = json.loads(raw)
        headers = {k: v for k, v in response.getheaders() if k.lower() in PASSED_HEADERS}
        return response.status, answer if isinstance(answer, dict) else {}, headers
    except (OSError, http.client.HTTPException, ValueError) as e:
        return 502, {"error": {"message": f"the run's gateway did not answer: {type(e).__name__}",
                               "type": "bad_gateway", "code": 502}}, {}
    finally:
        connection.close()
