"""What the fake model servers (fake_openai, fake_anthropic) share: a local HTTP server on a thread
of its own whose handlers keep connections alive, say nothing on stderr, and are all cut at stop.

A fake subclasses FakeServer and gives `handler_class()` a subclass of Handler with its routes."""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-reply (timeouts, a scripted disconnect) are expected; anything else,
        # such as a failing responder, is shown.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class FakeServer:
    """Started on 127.0.0.1 at a free port by `start` or `with`; `stop` ends it and its connections."""

    thread_name = "fake-server"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards what handler threads share; subclasses use it for their state
        self._httpd: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    def handler_class(self) -> type[Handler]:
        raise NotImplementedError

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._httpd.server_address[1]

    def start(self) -> Self:
        if self._httpd is None:
            # A handler class of this server's own: it knows its fake, and a change to one server's
            # handler class (a bench turning Nagle off) touches no other server.
            handler = type("Handler", (self.handler_class(),), {"fake": self})
            self._httpd = QuietServer(("127.0.0.1", 0), handler)
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:  # idle keep-alive handlers would go on answering pooled connections
            connections, self._connections = self._connections, set()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class Handler(BaseHTTPRequestHandler):
    """Keep-alive, quiet, and known to its fake (`fake`, set by FakeServer.start), which cuts its
    connection at stop."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real clients expect
    fake: FakeServer

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and benchmarks read stderr

    def route(self) -> str:
        return self.path.split("?", 1)[0]

    def lower_headers(self) -> dict:
        return {k.lower(): v for k, v in self.headers.items()}

    def read_json(self) -> Any:
        """The request's body as JSON, or None when it is empty or not JSON."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def send_bytes(self, status: int, data: bytes, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, payload: dict) -> None:
        self.send_bytes(status, json.dumps(payload).encode())
