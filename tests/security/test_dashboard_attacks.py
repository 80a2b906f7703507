"""Attacks on the dashboard (python -m apps.dashboard) over real HTTP, with synthetic runs whose
agents wrote hostile text everywhere (tests/support/synthetic_run.py, hostile=True). The browser-level
check that none of it runs is tests/test_dashboard_browser.py."""

from __future__ import annotations

import time

import pytest

from support.dashboard import assert_inert, get, pages_of


@pytest.mark.attack("dashboard: agent text (patches, transcripts, predictions, file names, errors) carrying "
                    "<script>, event handlers and javascript: links, shown on every page")
def test_agent_text_is_shown_as_text_on_every_page(runs, server):
    _, hostile = runs
    paths = pages_of(server, "hostile")
    assert len(paths) > 40
    bodies = []
    for path in ["/", *paths]:
        status, headers, body = get(server, path)
        assert status == 200, (path, body[:300])
        assert "script-src 'self'" in headers["content-security-policy"] and headers["x-content-type-options"] \
            == "nosniff"
        assert_inert(body)
        bodies.append(body)
    text = "\n".join(bodies)
    # The attacks are there, escaped: what the agent wrote can be read, not run.
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text and "<script>window.__pwned" not in text
    assert "&lt;img src=x onerror=" in text


@pytest.mark.attack("dashboard: requests for files outside the runs folder (.., encoded .., a linked run, "
                    "raw paths into the run)")
def test_nothing_outside_the_runs_folder_is_served(runs, server):
    root, hostile = runs
    for path in ["/runs/../../../../etc/passwd", "/runs/hostile/../../../../etc/passwd", "/static/../reader.py",
                 "/static/%2e%2e/reader.py", "/static/..%2fserver.py", "/runs/hostile/nodes/..%2f..%2frun.json",
                 "/runs/%2e%2e/plain", "/runs/linked", "/runs/not-a-run", "/runs/hostile/nodes/999",
                 "/runs/hostile/nodes/initial/node.json", "//etc/passwd", "/runs/hostile/compare?a=../x&b=1",
                 "/runs/hostile/evals", "/etc/passwd", "/runs/hostile/repo/config"]:
        status, _, body = get(server, path)
        assert status == 404, path
        assert "root:" not in body and "[core]" not in body
    _, _, index = get(server, "/")
    assert "/runs/hostile" in index and "/runs/plain" in index
    assert "/runs/linked" not in index and "not-a-run" not in index


@pytest.mark.attack("dashboard: a transcript that is a link to a host file, a fifo, or 5 MB")
def test_planted_links_fifos_and_huge_transcripts_are_not_followed(runs, server):
    _, hostile = runs
    started = time.monotonic()
    planted = hostile["hostile"]
    for node, expect in ((planted["symlink"], "No transcript: not shown"),
                         (planted["fifo"], "No transcript: not shown"),
                         (planted["big_transcript"], "Cut here")):
        status, _, body = get(server, f"/runs/hostile/nodes/{node}")
        assert status == 200 and expect in body, node
        assert "root:x:0:0" not in body
    assert time.monotonic() - started < 5  # a fifo would have blocked the read


@pytest.mark.attack("dashboard: a web page elsewhere reaching it through a name rebound to 127.0.0.1; "
                    "requests that write")
def test_a_foreign_host_and_writes_are_refused(server):
    assert get(server, "/")[0] == 200
    assert get(server, "/", host=f"localhost:{server}")[0] == 200
    status, _, body = get(server, "/", host=f"attacker.example:{server}")  # a name rebound to 127.0.0.1
    assert status == 403 and "unknown host" in body
    assert get(server, "/", host="127.0.0.1")[0] == 403  # not this server's port
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = get(server, "/runs/plain", method=method)
        assert status == 405 and headers["allow"] == "GET, HEAD"
