"""Tiny HTTP servers for sandbox tests: one on a Unix socket (standing in for the gateway's
socket) and one on the host's 127.0.0.1 (which sandboxed code must not reach)."""

import contextlib
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GATEWAY_SAYS = "gateway says hello"
HOST_SAYS = "reached the host"


def reply_handler(body: str) -> type[BaseHTTPRequestHandler]:
    """A handler that answers every GET with `body`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


@contextlib.contextmanager
def in_a_thread(server: socketserver.BaseServer) -> Iterator[socketserver.BaseServer]:
    """`server` serving from a daemon thread for the block; shut down and its socket closed on the way out."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def unix_http_server():
    """Yields the socket path; the folder is short-named since sun_path holds 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="gwtest-"))
    folder.chmod(0o711)
    path = folder / "gateway.sock"
    server = _UnixServer(str(path), reply_handler(GATEWAY_SAYS))
    path.chmod(0o666)
    try:
        with in_a_thread(server):
            yield path
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()


@contextlib.contextmanager
def host_http_server():
    """Yields the port of a server on the host's 127.0.0.1."""
    with in_a_thread(ThreadingHTTPServer(("127.0.0.1", 0), reply_handler(HOST_SAYS))) as server:
        yield server.server_address[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (as of now)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
