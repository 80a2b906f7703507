"""The gateway's listeners: an HTTP endpoint on host:port and a Unix socket for sandboxes.

Both hand each request to the gateway; a request body is read only when its declared size is
within gateway.max_request_mb. Socket folders that a killed gateway left behind are removed
when the next one starts.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SOCKET_DIR_PREFIX = "hyperagents-gw-"  # under the temp folder: a short path, as sun_path holds 108 bytes


@dataclass
class Reply:
    status: int
    body: dict
    headers: dict


def error_reply(status: int, message: str, kind: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": kind, "code": status}}, {})


def remove_dead_socket_dirs() -> None:
    """Remove socket folders of gateways that died without cleaning up (a SIGKILLed run):
    ours, and no one answers on their socket."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SOCKET_DIR_PREFIX}*"):
        try:
            info = folder.stat()
            # Not someone else's, and not one a gateway is creating right now.
            if info.st_uid != os.getuid() or time.time() - info.st_mtime < 60:
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
    (services/sandbox/ray_host.py), which opens no port."""

    def __init__(self, gateway, host: str | None, port: int = 0):
        handler = type("GatewayHandler", (_Handler,), {"gateway": gateway})
        self._server = _Server((host, port), handler) if host is not None else None
        # Sandboxes have no network: they reach the gateway through this socket, mounted in.
        # Its folder is short-named (sun_path holds 108 bytes) and only traversable by others,
        # so a sandbox user other than ours can connect but not list it.
        remove_dead_socket_dirs()
        self._socket_dir = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
        self._socket_dir.chmod(0o711)
        unix_handler = type("GatewayUnixHandler", (handler,), {"disable_nagle_algorithm": False})
        self._unix_server = _UnixServer(str(self.unix_socket), unix_handler)
        self.unix_socket.chmod(0o666)
        for name, server in (("gateway", self._server), ("gateway-unix", self._unix_server)):
            if server is None:
                continue
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name,
                             daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def unix_socket(self) -> Path:
        return self._socket_dir / "gateway.sock"

    def close(self) -> None:
        for server in (self._server, self._unix_server):
            if server is None:
                continue
            server.closing = True
            server.shutdown()
            server.server_close()
        shutil.rmtree(self._socket_dir, ignore_errors=True)


class _QuietOnHangUps:
    closing = False  # set when the gateway stops: a request still in flight then has no one to answer

    def handle_error(self, request, client_address):
        """A caller that hung up (a sandbox closed with calls in flight, when the run stops), or a
        request that outlived the gateway (its ledger closed under it), is no error to print: a
        command that stops ends with one line."""
        if not (self.closing or isinstance(sys.exc_info()[1], OSError)):
            super().handle_error(request, client_address)


class _Server(_QuietOnHangUps, ThreadingHTTPServer):
    daemon_threads = True
    # Every worker thread connects at once when a batch starts; the default backlog of 5
    # drops some of those connections and the client retries only after a second.
    request_queue_size = 128


class _UnixServer(_QuietOnHangUps, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    gateway = None  # the Gateway it answers for: set on the subclass each gateway makes
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the body waits ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):  # the ledger is the log; stderr stays for the user
        pass

    def _send(self, reply: Reply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            models = self.gateway.allowed_models()
            self._send(Reply(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]}, {}))
        elif self.path.rstrip("/") == "/health":
            self._send(Reply(200, {"status": "ok"}, {}))
        else:
            self._send(error_reply(404, f"no route {self.path}", "not_found"))

    def do_POST(self):
        """A chat request; its body is read only when its declared size is within gateway.max_request_mb."""
        api_key = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        length = self.headers.get("Content-Length", "").strip()
        limit = self.gateway.gw.max_request_mb * 2**20
        if not (length.isascii() and length.isdigit()):
            return self._refuse_unread(api_key, 400, "a request needs a Content-Length header with its size in bytes",
                                       "invalid_request_error")
        if int(length) > limit:
            return self._refuse_unread(api_key, 413, f"request body of {length} bytes is over gateway.max_request_mb "
                                       f"({self.gateway.gw.max_request_mb} MB)", "request_too_large")
        raw = self.rfile.read(int(length))
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return self._send(error_reply(404, f"no route {self.path}", "not_found"))
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # also bytes that are not UTF-8, and nesting too deep to parse
            body = None
        if not isinstance(body, dict):
            return self._send(self.gateway.refuse(api_key, 400, "request body is not a JSON object",
                                                  "invalid_request_error"))
        self._send(self.gateway.handle_chat(api_key, body))

    def _refuse_unread(self, api_key: str, status: int, message: str, kind: str) -> None:
        """Refuse a request whose body stays unread: the connection closes after the answer, since
        the unread bytes would otherwise be taken for the next request."""
        reply = self.gateway.refuse(api_key, status, message, kind)
        reply.headers["Connection"] = "close"
        self._send(reply)
