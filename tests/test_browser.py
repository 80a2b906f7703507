"""The browser test infrastructure (tests/support/browser.py) on a real headless Chromium: it runs a
page's script, takes screenshots, reports console errors, and reaches nothing but loopback."""

from __future__ import annotations

import contextlib
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support.browser import chromium_missing, js_errors, open_browser, screenshot
from support.little_servers import in_a_thread

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))]

PAGE = b"""<!doctype html>
<html><body>
<p id="out">waiting</p>
<script>
document.getElementById("out").textContent = "script ran " + (6 * 7);
console.error("a console error the test expects");
</script>
</body></html>"""


@contextlib.contextmanager
def page_server(host: str = "127.0.0.1"):
    """Serves PAGE on host (port 0) from a thread; yields (port, paths requested)."""
    requested = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args):
            pass

    with in_a_thread(ThreadingHTTPServer((host, 0), Handler)) as server:
        yield server.server_address[1], requested


@pytest.fixture(scope="module")
def browser():
    with open_browser(width=800, height=600, page_load_timeout=5) as driver:
        yield driver


def test_runs_the_page_script_and_takes_a_screenshot(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_ARTIFACTS", str(tmp_path / "artifacts"))
    with page_server() as (port, requested):
        browser.get(f"http://127.0.0.1:{port}/dashboard")
        assert browser.find_element("id", "out").text == "script ran 42"
        assert requested[0] == "/dashboard"
        assert browser.execute_script("return [window.innerWidth, window.innerHeight]") == [800, 600]
        assert "HeadlessChrome" in browser.execute_script("return navigator.userAgent")
        errors = js_errors(browser)
        assert [e for e in errors if "a console error the test expects" in e["message"]], errors
        path = screenshot(browser, "infrastructure")
    assert path == tmp_path / "artifacts" / "infrastructure.png"
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert int.from_bytes(path.read_bytes()[16:20]) == 800  # the IHDR chunk's width


def test_reaches_nothing_off_loopback(browser):
    from selenium.common.exceptions import WebDriverException

    # A name Chromium itself maps to loopback, and another loopback address: both would reach the
    # server below without the resolver rule, which makes this hold on a machine with internet too.
    with page_server() as (port, requested), page_server("127.0.0.2") as (port2, requested2):
        urls = ["http://example.com/", "http://93.184.215.14/",
                f"http://blocked.localhost:{port}/", f"http://127.0.0.2:{port2}/"]
        for url in urls:
            started = time.monotonic()
            with pytest.raises(WebDriverException, match="ERR_NAME_NOT_RESOLVED"):
                browser.get(url)
            assert time.monotonic() - started < 5, url
        assert requested == requested2 == []
        browser.get(f"http://localhost:{port}/")
        assert browser.find_element("id", "out").text == "script ran 42"
