"""The gateway's listeners: an HTTP endpoint on host:port and a Unix socket for sandboxes.

Both hand each request to the gateway; a request body is read only when its declared size is
within gateway.max_request_mb. Socket folders that a killed gateway left behind are removed
when the next one starts.

Each connection has a thread, so connections are bounded: at most MAX_CONNECTIONS_PER_LISTENER
on one listener and MAX_CONNECTIONS over a gateway's listeners; one past either is answered 503
(Retry-After) and closed at once, by the accepting thread. A connection has IDLE_TIMEOUT_S to
start a request, then READ_TIMEOUT_S for its headers and body, and READ_TIMEOUT_S for the reply to
be taken: a thread shuts down late connections, which ends the read or write it is blocked in
(half-open connections, slow headers, a caller that never reads). What goes wrong with a
connection (a caller that hung up, a late one, one turned away) is one line in the run's
`gateway.log` (bounded), never a traceback on the terminal.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import socketserver
import stat
import sys
import tempfile
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from services.errors import MachineDown
from services.fsutil import AppendFile, open_append
from services.gateway.inbound import BY_PATH, CHAT, Event, Inbound, Reply, error_reply, event_stream, in_shape
from services.gateway.machine import Reach
from services.gateway.params import Refusal

if TYPE_CHECKING:
    from services.config import GatewayConfig
    # What _Bounded is mixed into (a threading TCP or Unix server), for the checker: at run time a plain mixin.
    class _Mixin(socketserver.ThreadingMixIn, socketserver.BaseServer): ...
else:
    _Mixin = object

SOCKET_DIR_PREFIX = "hyperagents-gw-"  # under the temp folder: a short path, as sun_path holds 108 bytes
# A sandbox's worker holds one connection per thread (harness.num_workers), a Ray door at most 64.
MAX_CONNECTIONS_PER_LISTENER = 256
_Address = tuple[str, int] | str  # (host, port) on TCP, a path on a Unix socket (a caller's is empty)
MAX_CONNECTIONS = 512  # over all listeners of one gateway
IDLE_TIMEOUT_S = 120.0  # for a connection to start its next request (a client's pool drops closed ones)
READ_TIMEOUT_S = 30.0  # for a request's headers and body once it started, and for its reply to be taken
LOG_MAX_BYTES = 2**20  # of gateway.log; later lines are dropped
_BUSY = json.dumps({"error": {"message": "the gateway has too many open connections; retry", "type":
                              "service_unavailable", "code": 503}}).encode()
BUSY_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY), _BUSY))


def remove_dead_socket_dirs() -> None:
    """Remove socket folders of gateways that died without cleaning up (a SIGKILLed run):
    ours, and no one answers on their socket."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SOCKET_DIR_PREFIX}*"):
        try:
            info = folder.lstat()  # the shared temp folder: a name there may be another user's link
            # A folder of ours, not someone else's or a link, and not one a gateway is creating right now.
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or time.time() - info.st_mtime < 60:
                continue
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(folder / "gateway.sock"))
                continue  # a live gateway
            finally:
                probe.close()
        except (ConnectionRefusedError, FileNotFoundError):
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


class Listeners:
    """A gateway's HTTP endpoint and Unix socket, each served by a daemon thread until `close`.

    With `host` None only the socket: a Ray worker node's door to the run's gateway
    (services/sandbox/ray_host.py), which opens no port. `log`: the file of gateway.log (None: no log)."""

    def __init__(self, gateway: Answerer, host: str | None, port: int = 0, log: Path | None = None) -> None:
        handler = type("GatewayHandler", (_Handler,), {"gateway": gateway})
        self.log = _Log(log)
        self._deadlines = _Deadlines(self.log)
        overall = _Gate(MAX_CONNECTIONS, "the gateway")
        shared = {"overall": overall, "deadlines": self._deadlines, "log": self.log}
        self._server = _Server((host, port), handler, _Gate(MAX_CONNECTIONS_PER_LISTENER, "its HTTP listener"),
                               **shared) if host is not None else None
        # Sandboxes have no network: they reach the gateway through this socket, mounted in.
        # Its folder is short-named (sun_path holds 108 bytes) and only traversable by others,
        # so a sandbox user other than ours can connect but not list it.
        remove_dead_socket_dirs()
        self._socket_dir = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
        self._socket_dir.chmod(0o711)
        unix_handler = type("GatewayUnixHandler", (handler,), {"disable_nagle_algorithm": False})
        self._unix_server = _UnixServer(str(self.unix_socket), unix_handler,
                                        _Gate(MAX_CONNECTIONS_PER_LISTENER, "its Unix socket"), **shared)
        self.unix_socket.chmod(0o666)
        threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
                   for name, server in (("gateway", self._server), ("gateway-unix", self._unix_server)) if server]
        for thread in threads:
            thread.start()
        self.reach = Reach(self.unix_socket, threads)  # says when callers can no longer reach the gateway

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("this gateway listens on its socket only (no host)")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def unix_socket(self) -> Path:
        return self._socket_dir / "gateway.sock"

    def close(self) -> None:
        self.reach.closed = True
        for server in (self._server, self._unix_server):
            if server is None:
                continue
            server.closing = True
            server.shutdown()
            server.server_close()
        self._deadlines.stop()
        self.log.close()
        shutil.rmtree(self._socket_dir, ignore_errors=True)


class _Log:
    """gateway.log: one line per event, up to LOG_MAX_BYTES (then one line saying later ones are dropped)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._file: AppendFile | None = None
        self._written = 0
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        if self._path is None:
            return
        data = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n".encode(errors="replace")
        with self._lock:
            if self._written >= LOG_MAX_BYTES:
                return
            if self._written + len(data) > LOG_MAX_BYTES:
                data, self._written = b"gateway.log is full: later lines are dropped\n", LOG_MAX_BYTES
            else:
                self._written += len(data)
            try:
                self._file = self._file or open_append(self._path)  # held until close; no link followed
                self._file.write(data)
            except (OSError, MachineDown):
                self._path = None  # a log that cannot be written is no reason to fail a request

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None


class _Gate:
    """A count of open connections with a ceiling."""

    def __init__(self, most: int, name: str) -> None:
        self.most = most
        self.name = name
        self.open = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.open >= self.most:
                return False
            self.open += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.open -= 1


class _Deadlines:
    """Connections with a time by which their current step must end; a thread shuts down late ones,
    which ends the read or write their handler is blocked in."""

    def __init__(self, log: _Log) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._due: dict[socket.socket, tuple[float, str]] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._reap, name="gateway-deadlines", daemon=True).start()

    def set(self, conn: socket.socket, seconds: float | None, step: str = "") -> None:
        """`conn` must end `step` within `seconds` (None: no deadline, while the gateway itself works)."""
        with self._lock:
            if seconds is None:
                self._due.pop(conn, None)
            else:
                self._due[conn] = (time.monotonic() + seconds, step)

    def _reap(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                late = [(conn, step) for conn, (due, step) in self._due.items() if due < now]
                for conn, _step in late:
                    del self._due[conn]
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            for _, step in late:
                self.log.line(f"closed a connection that did not {step} in time")

    def stop(self) -> None:
        self._stop.set()


class Answerer(Protocol):
    """What a listener asks of the gateway it answers for: the Gateway, or, on a Ray node, the
    Door that forwards to it (services/sandbox/ray_host.py)."""

    @property
    def gw(self) -> GatewayConfig: ...
    def models_for(self, api_key: str) -> list[str]: ...
    def handle(self, protocol: str, api_key: str, body: dict) -> Reply:
        """Answer one request of the inbound protocol named `protocol` (services/gateway/inbound/)."""
        ...
    def refuse(self, api_key: str, status: int, message: str, kind: str) -> Reply: ...


class _Bounded(_Mixin):
    """What both listeners add to a threading server: the connection gates, deadlines and a quiet log."""

    closing = False  # set when the gateway stops: a request still in flight then has no one to answer

    def __init__(self, address: _Address, handler: type[_Handler], gate: _Gate, *, overall: _Gate,
                 deadlines: _Deadlines, log: _Log) -> None:
        self.gate, self.overall, self.deadlines, self.log = gate, overall, deadlines, log
        super().__init__(address, handler)

    def process_request(self, request: socket.socket, client_address: _Address) -> None:
        """Serve the connection on a thread of its own, or, past a gate, answer 503 and close it here."""
        full = next((g for g in (self.gate, self.overall) if not g.enter()), None)
        if full is not None:
            if full is self.overall:
                self.gate.leave()
            self.log.line(f"turned a connection away: {full.name} has {full.most} open")
            try:
                request.setblocking(False)
                request.send(BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread for it: the caller closes the connection
            self._leave()
            raise

    def process_request_thread(self, request: socket.socket, client_address: _Address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.deadlines.set(request, None)
            self._leave()

    def _leave(self) -> None:
        self.overall.leave()
        self.gate.leave()

    def handle_error(self, request: socket.socket, client_address: _Address) -> None:
        """One line in gateway.log for a caller that hung up or was too slow, the traceback there for
        anything else; nothing on the terminal, where a command that stops ends with one line."""
        if self.closing:
            return
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            self.log.line(f"a caller's connection ended: {type(error).__name__}: {str(error)[:200]}")
        else:
            self.log.line("a request failed in the gateway:\n" + traceback.format_exc()[-4000:])


class _Server(_Bounded, ThreadingHTTPServer):
    daemon_threads = True
    # Every worker thread connects at once when a batch starts; the default backlog of 5
    # drops some of those connections and the client retries only after a second.
    request_queue_size = 128


class _UnixServer(_Bounded, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    gateway: Answerer  # the Gateway it answers for: set on the subclass each gateway makes
    server: _Bounded
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the body waits ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:  # the ledger and gateway.log are the logs; stderr stays for the user
        pass

    def handle_one_request(self) -> None:
        self.server.deadlines.set(self.connection, IDLE_TIMEOUT_S, "start a request")
        super().handle_one_request()

    def parse_request(self) -> bool:
        """Called once the request line came: its headers (read here) and body have READ_TIMEOUT_S."""
        self.server.deadlines.set(self.connection, READ_TIMEOUT_S, "send its request")
        return super().parse_request()

    def _send(self, reply: Reply, events: list[Event] | None = None) -> None:
        """Write `reply`, or, with `events`, its answer as a server-sent event stream (of known length)."""
        self.server.deadlines.set(self.connection, READ_TIMEOUT_S, "take its reply")
        data = json.dumps(reply.body).encode() if events is None else event_stream(events)
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json" if events is None else "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _key(self) -> str:
        """The caller's session key: `Authorization: Bearer KEY` (OpenAI's clients, Anthropic's with an auth
        token), else `x-api-key: KEY` (Anthropic's with an API key, as Claude Code sends ANTHROPIC_API_KEY)."""
        bearer = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return bearer or self.headers.get("x-api-key", "").strip()

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") in ("/v1/models", "/models"):
            api_key = self._key()
            try:
                models = self.gateway.models_for(api_key)
            except Refusal as refused:
                return self._send(error_reply(refused.status, refused.message, refused.kind))
            self._send(Reply(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]}, {}))
        elif self.path.rstrip("/") == "/health":
            self._send(Reply(200, {"status": "ok"}, {}))
        else:
            self._send(error_reply(404, f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:
        """A request of an inbound protocol, routed by its path (a query, as Claude Code's `?beta=true`, aside),
        answered in that protocol's shape; its body is read only when its declared size is within
        gateway.max_request_mb."""
        api_key = self._key()
        inbound = BY_PATH.get(self.path.split("?", 1)[0].rstrip("/"))
        length = self.headers.get("Content-Length", "").strip()
        limit = self.gateway.gw.max_request_mb * 2**20
        if not (length.isascii() and length.isdigit()):
            return self._refuse_unread(api_key, 400, "a request needs a Content-Length header with its size in bytes",
                                       "invalid_request_error", inbound)
        if int(length) > limit:
            return self._refuse_unread(api_key, 413, f"request body of {length} bytes is over gateway.max_request_mb "
                                       f"({self.gateway.gw.max_request_mb} MB)", "request_too_large", inbound)
        raw = self.rfile.read(int(length))
        if len(raw) < int(length):  # the caller hung up, or was too slow (its connection was shut down)
            self.close_connection = True
            return
        self.server.deadlines.set(self.connection, None)  # the gateway's own time: a provider call may be long
        if inbound is None:
            return self._send(error_reply(404, f"no route {self.path[:200]}", "not_found"))
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # also bytes that are not UTF-8, and nesting too deep to parse
            body = None
        if not isinstance(body, dict):
            return self._send(in_shape(inbound, self.gateway.refuse(api_key, 400, "request body is not a JSON object",
                                                                   "invalid_request_error")))
        reply = self.gateway.handle(inbound.name, api_key, body)
        self._send(reply, inbound.events(reply.body) if reply.status == 200 and inbound.streams(body) else None)

    def _refuse_unread(self, api_key: str, status: int, message: str, kind: str, inbound: Inbound | None) -> None:
        """Refuse a request whose body stays unread: the connection closes after the answer, since
        the unread bytes would otherwise be taken for the next request."""
        reply = in_shape(inbound or CHAT, self.gateway.refuse(api_key, status, message, kind))
        reply.headers["Connection"] = "close"
        self._send(reply)
