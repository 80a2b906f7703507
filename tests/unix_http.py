"""A tiny HTTP server on a Unix socket, standing in for the gateway's socket in sandbox tests."""

import contextlib
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"gateway says hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def unix_http_server():
    """Yields the socket path; the folder is short-named since sun_path holds 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="gwtest-"))
    folder.chmod(0o711)
    path = folder / "gateway.sock"
    server = _Server(str(path), _Handler)
    path.chmod(0o666)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        path.unlink(missing_ok=True)
        folder.rmdir()
