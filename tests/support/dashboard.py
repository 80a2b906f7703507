"""The dashboard served over real HTTP from synthetic runs full of hostile text, and the checks
its tests (tests/test_dashboard.py, tests/security/) make of every page.

`runs` and `server` are fixtures: conftest.py imports them, so any test may name them. `serving` serves
a runs folder of a test's own for a block."""

import contextlib
import http.client
import os
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from apps.dashboard.server import serve
from support.little_servers import in_a_thread
from support.synthetic_run import ATTACKS, make_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder (a hostile run, a plain one, a folder that is no run, a link to a run) and the
    hostile run's summary."""
    root = tmp_path_factory.mktemp("runs")
    hostile = make_run(root / "hostile", nodes=40, seed=1, hostile=True, name=ATTACKS["script"],
                       tags=[ATTACKS["img"], ATTACKS["javascript_url"]])
    make_run(root / "plain", nodes=12, seed=2)
    (root / "not-a-run").mkdir()
    os.symlink(root / "plain", root / "linked")  # a link in the runs folder is not a run of it
    return root, hostile


@pytest.fixture(scope="module")
def server(runs):
    """The port of a dashboard serving `runs`, for the module."""
    root, _ = runs
    with serving(root) as port:
        yield port


@contextlib.contextmanager
def serving(root: Path) -> Iterator[int]:
    """The dashboard of the runs folder `root`, served from a thread on a free loopback port for the
    block: yields the port; the server is shut down and its socket closed on the way out."""
    with in_a_thread(serve(root, "127.0.0.1", 0)) as srv:
        yield srv.server_address[1]


def get(port: int, path: str, host: str | None = None, method: str = "GET") -> tuple[int, dict, str]:
    """One request with the Host header given (by default the server's own): status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{port}")
    conn.endheaders()
    answer = conn.getresponse()
    body = answer.read().decode("utf-8", errors="replace")
    conn.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, as the browser would parse them."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def assert_inert(body: str) -> None:
    """Nothing on the page can run but the dashboard's own script, and no link leaves it."""
    parser = Elements()
    parser.feed(body)
    for tag, attrs in parser.tags:
        assert tag not in ("iframe", "object", "embed", "img", "base", "form") or tag == "form" and \
            (attrs.get("action", "").startswith("/runs/") or attrs.get("action") == "/compare"), (tag, attrs)
        assert not [a for a in attrs if a.lower().startswith("on")], (tag, attrs)
        if tag == "script":
            assert attrs == {"src": "/static/dashboard.js"}
        for name in ("href", "src", "action", "xlink:href"):
            if name in attrs:
                value = attrs[name]
                assert value.startswith("/") and not value.startswith("//") or value == "data:," or \
                    name == "href" and re.fullmatch(r"#[\w-]+", value), (tag, attrs)  # a place on this page


def pages_of(port: int, run: str) -> list[str]:
    """The run page, every node page and a comparison of every node with its parent."""
    _, _, page = get(port, f"/runs/{run}")
    parser = Elements()
    parser.feed(page)
    links = {a["href"] for t, a in parser.tags if t == "a" and "href" in a}
    nodes = sorted(link for link in links if link.startswith(f"/runs/{run}/nodes/"))
    compares = []
    for link in nodes:
        _, _, node_page = get(port, link)
        sub = Elements()
        sub.feed(node_page)
        compares += [a["href"] for t, a in sub.tags if t == "a" and a.get("id") == "vs-parent"]
    return [f"/runs/{run}", *nodes, *compares]
