"""A stand-in for the xllamacpp engine whose server crashes on its first completion, as llama.cpp
built for another CPU does: with this folder first on PYTHONPATH, services/local_serve.py starts
it instead of the real one. It lists its model (GET), and dies of SIGSEGV on the first POST."""

import http.server
import os
import signal
import threading
import types


class CommonParams(types.SimpleNamespace):
    def __init__(self):
        super().__init__(model=types.SimpleNamespace(), cpuparams=types.SimpleNamespace(),
                         cpuparams_batch=types.SimpleNamespace())


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"object": "list", "data": []}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        os.kill(os.getpid(), signal.SIGSEGV)


class Server:
    def __init__(self, params):
        self._httpd = http.server.ThreadingHTTPServer((params.hostnames[0], params.port), _Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
