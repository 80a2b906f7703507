"""The dashboard's web server: read-only, its own routes only, on the loopback unless told.

Requests name runs and nodes; both are looked up among what exists (a run is a folder of the
runs folder that holds a run.json and no predictions of its own, which would make it an evaluation
folder of domains.harness, listed apart: evaluations.py; a node one the run recorded), never joined into a path, so
no request reaches a file outside the runs folder. A Host header other than the server's own
names is refused (a web page elsewhere cannot reach it by rebinding a name to 127.0.0.1), and
every page forbids inline script and style, so text an agent wrote can never run as code.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from apps.dashboard import pages, runs_page
from apps.dashboard.compare import compare_page
from apps.dashboard.evaluations import Evaluation, evaluation_marks, is_evaluation, read_evaluation
from apps.dashboard.reader import RunData, RunReader
from archive.experiments import read_group
from archive.records import NODE_ID, Node
from services.errors import UserError
from services.render import console

ASSETS = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class NotFound(Exception):
    pass


class Dashboard:
    """What the server shows: the runs under `root` (or `root` itself when it is a run)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.one_evaluation = is_evaluation(self.root)
        self.one_run = (self.root / "run.json").is_file() and not self.one_evaluation
        self._readers: dict[str, RunReader] = {}
        self._lock = threading.Lock()
        self.assets = {name: pages.static(name).encode() for name in ASSETS}

    def runs(self) -> dict[str, Path]:
        """The runs here by name: the folders that hold a run.json, and the replicates of each group
        folder (group.json) as "GROUP/seed-N"."""
        if self.one_run:
            return {self.root.name: self.root}
        found: dict[str, Path] = {}
        for entry in self._entries():
            if is_evaluation(entry.path):
                continue
            if os.path.isfile(os.path.join(entry.path, "run.json")):
                found[entry.name] = Path(entry.path)
                continue
            try:
                group = read_group(Path(entry.path))
            except UserError:
                group = None  # not a group the run wrote: its folders are no runs of this list
            for run in group["runs"] if group else []:
                path = Path(entry.path) / run
                if not path.is_symlink() and (path / "run.json").is_file():
                    found[f"{entry.name}/{run}"] = path
        return found

    def _entries(self) -> list[os.DirEntry]:
        """The folders of the runs folder (links to folders are no runs of it), by name."""
        if self.one_run or self.one_evaluation or not self.root.is_dir():
            return []
        return sorted((e for e in os.scandir(self.root) if e.is_dir(follow_symlinks=False)), key=lambda e: e.name)

    def evaluation_folders(self) -> dict[str, Path]:
        """The evaluation folders of domains.harness here (or the root, when it is one), by name."""
        if self.one_evaluation:
            return {self.root.name: self.root}
        return {e.name: Path(e.path) for e in self._entries() if is_evaluation(e.path)}

    def evaluations(self) -> list[Evaluation]:
        return [read_evaluation(name, path) for name, path in self.evaluation_folders().items()]

    def reader(self, name: str) -> RunReader:
        path = self.runs().get(name)
        if path is None:
            raise NotFound(f"no run {name!r} here")
        with self._lock:
            if name not in self._readers:
                self._readers[name] = RunReader(path, name)
            return self._readers[name]

    def read_all(self) -> None:
        """Read every run once, so that the first page opened does not wait for it."""
        for name in self.runs():
            try:
                reader = self.reader(name)
                reader.read()
                reader.spend()
                reader.spend_over_time()
            except Exception:
                pass  # the page that shows this run will say what is wrong

    def respond(self, target: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `target`."""
        parts = urlsplit(target)
        segments = [unquote(s) for s in parts.path.split("/") if s]
        lists = parse_qs(parts.query)
        query = {k: v[0] for k, v in lists.items()}
        try:
            return self._route(segments, query, lists)
        except NotFound as e:
            return 404, "text/plain; charset=utf-8", f"not found: {e}\n".encode()

    def _route(self, segments: list[str], query: dict, lists: dict) -> tuple[int, str, bytes]:
        html = "text/html; charset=utf-8"
        if not segments:
            runs = [(n, self.reader(n).read()) for n in self.runs()]
            return 200, html, pages.index(runs, self._version(), query.get("tag"), self.evaluations()).encode()
        if segments == ["compare"]:
            names = list(dict.fromkeys(lists.get("run", [])))[:runs_page.MAX_COMPARED]
            runs = [(n, self.reader(n).read()) for n in names]
            return 200, html, runs_page.compare_runs(runs, self._version()).encode()
        if segments == ["live"]:
            return self._json({"version": self._version()})
        if len(segments) == 2 and segments[0] == "static" and segments[1] in ASSETS:
            return 200, ASSETS[segments[1]], self.assets[segments[1]]
        if len(segments) < 2 or segments[0] != "runs":
            raise NotFound("no such page")
        reader = self.reader(segments[1])
        data = reader.read()
        rest = segments[2:]
        if not rest:
            return 200, html, pages.run_page(reader, data).encode()
        if rest == ["live"]:
            return self._json({"version": reader.version()})
        if rest == ["nodes"]:
            return 200, html, pages.nodes_page(reader, data).encode()
        if len(rest) == 2 and rest[0] == "nodes":
            flight = next((f for f in data.in_flight if f.node_id == rest[1]), None)
            if flight is not None and rest[1] not in data.nodes:
                return 200, html, pages.flight_page(reader, data, flight).encode()
            return 200, html, pages.node_page(reader, data, self._node(data, rest[1])).encode()
        if rest == ["compare"]:
            a, b = self._node(data, query.get("a", "")), self._node(data, query.get("b", ""))
            return 200, html, compare_page(reader, data, a, b).encode()
        raise NotFound("no such page")

    def _version(self) -> str:
        """The versions of all runs in one, of the same two parts (records-spend); the evaluation
        folders' files count among the records."""
        parts = [(name, *self.reader(name).version().split("-")) for name in self.runs()]
        records = hash((tuple(p[:2] for p in parts), evaluation_marks(list(self.evaluation_folders().values()))))
        spend = hash(tuple(p[2] for p in parts))
        return f"{records & 0xFFFFFFFFFFFF:x}-{spend & 0xFFFFFFFFFFFF:x}"

    @staticmethod
    def _node(data: RunData, node_id: str) -> Node:
        if not NODE_ID.fullmatch(node_id) or node_id not in data.nodes:
            raise NotFound(f"no node {node_id!r} in run {data.name}")
        return data.nodes[node_id]

    @staticmethod
    def _json(value: object) -> tuple[int, str, bytes]:
        return 200, "application/json", json.dumps(value).encode()


def handler_for(dashboard: Dashboard, allowed_hosts: set[str],
                log: Callable[[str], None] | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "hyperagents-dashboard"
        sys_version = ""

        def do_GET(self) -> None:
            self._answer(send_body=True)

        def do_HEAD(self) -> None:
            self._answer(send_body=False)

        def _refuse(self) -> None:
            self._send(405, "text/plain; charset=utf-8", b"read-only: GET and HEAD only\n",
                       extra={"Allow": "GET, HEAD"})

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

        def _answer(self, send_body: bool) -> None:
            if self.headers.get("Host", "") not in allowed_hosts:
                self._send(403, "text/plain; charset=utf-8", b"unknown host\n", send_body)
                return
            try:
                status, kind, body = dashboard.respond(self.path)
            except Exception as e:  # a bug of ours, or a run folder changing under the read: one line, no dump
                # The path is the requester's text and the error may quote a run's: both shown visibly.
                print(console(f"dashboard: {self.path[:200]}: {type(e).__name__}: {e}"), file=sys.stderr, flush=True)
                status, kind, body = 500, "text/plain; charset=utf-8", b"the dashboard failed to read this page\n"
            self._send(status, kind, body, send_body)

        def _send(self, status: int, kind: str, body: bytes, send_body: bool = True, extra: dict | None = None) -> None:
            self.send_response(status)
            for name, value in {**HEADERS, **(extra or {}), "Content-Type": kind,
                                "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            if log is not None:  # the request line is the requester's text: one visible line
                log(console(format % args))

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    dashboard: Dashboard  # what it serves, set once made

    def handle_error(self, request: object, client_address: object) -> None:
        """A connection that failed outside a page (a client gone mid-reply): one visible line, not
        socketserver's traceback."""
        error = sys.exc_info()[1]
        print(console(f"dashboard: a request from {client_address} failed: {type(error).__name__}: {error}"),
              file=sys.stderr, flush=True)


def serve(root: Path, host: str = "127.0.0.1", port: int = 0, log: Callable[[str], None] | None = None) -> Server:
    """A dashboard server bound to (host, port), not yet serving (call serve_forever)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("Server", (Server,), {"address_family": family})
    dashboard = Dashboard(root)
    server = server_class((host, port), handler_for(dashboard, set()), bind_and_activate=True)
    bound = server.server_address[1]
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in str(host) else str(host)}
    server.RequestHandlerClass = handler_for(dashboard, {f"{n}:{bound}" for n in names}, log)
    server.dashboard = dashboard
    threading.Thread(target=dashboard.read_all, name="first-read", daemon=True).start()
    return server


def url_of(server: Server) -> str:
    host, port = server.server_address[:2]
    host = str(host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"
