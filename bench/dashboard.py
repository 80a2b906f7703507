"""Time to first render of the dashboard's pages on a 1,000-node run, and the server's peak RSS.

Makes a synthetic run (tests/support/synthetic_run.py: the loop's own record format, 1,000 nodes,
their evaluations, ledger, patches and transcripts), starts `python -m apps.dashboard` on
it, and loads the run page (the tree) and the best node's page in headless Chromium
(Debian's chromium through Selenium, as the tests do). For each page it prints, from the
browser's own timing, the time from navigation to the first contentful paint and to the end
of the load event: first the cold load (the server reads the run), then the median of warm
loads. Side by side, the same browser loads the same HTML saved as static files and served by
`python -m http.server`: the ratio is what the dashboard costs over a page that costs nothing
to make. Targets: under 1 s per page, under 200 MB for the server.

    python bench/dashboard.py [--nodes 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

TARGET_S = 1.0
TARGET_MB = 200.0

TIMING = """
const nav = performance.getEntriesByType("navigation")[0];
const paint = performance.getEntriesByName("first-contentful-paint")[0];
return {paint: paint ? paint.startTime : null, load: nav.loadEventEnd, response: nav.responseEnd,
        nodes: document.querySelectorAll(".tree-node").length};
"""


def start(command: list[str], ready: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if ready not in line:
        proc.kill()
        sys.exit(f"error: {' '.join(command[:4])} did not start: {line or proc.stderr.read()[-500:]}")
    return proc, line


def load(driver, address: str) -> dict:
    driver.get(address)
    timing = driver.execute_script(TIMING)
    deadline = time.monotonic() + 30
    while not (timing["load"] and timing["paint"]) and time.monotonic() < deadline:  # not loaded or painted yet
        time.sleep(0.01)
        timing = driver.execute_script(TIMING)
    return timing


def measure(driver, address: str, repeat: int) -> dict:
    cold = load(driver, address)
    warm = [load(driver, address) for _ in range(repeat)]
    return {"cold": cold, "paint": statistics.median(t["paint"] for t in warm) / 1000,
            "load": statistics.median(t["load"] for t in warm) / 1000, "nodes": cold["nodes"]}


def peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def main() -> None:
    from support.browser import chromium_missing, open_browser
    from support.synthetic_run import make_run

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5, help="warm loads per page (their median is printed)")
    args = ap.parse_args()
    if chromium_missing():
        sys.exit(f"error: {chromium_missing()}")
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as scratch:
        run = Path(scratch) / "runs" / "big"
        started = time.monotonic()
        summary = make_run(run, nodes=args.nodes, seed=0)
        print(f"synthetic run: {args.nodes} nodes in {time.monotonic() - started:.1f} s")
        best = summary["best"]
        server, line = start([sys.executable, "-m", "apps.dashboard", str(run.parent), "--port", "0"],
                             "dashboard: ")
        base = line.split()[1]
        pages = {"tree page": f"{base}runs/big", "node page": f"{base}runs/big/nodes/{best}"}
        static = Path(scratch) / "static"
        (static / "static").mkdir(parents=True)
        try:
            for name, address in pages.items():  # the same HTML, saved, for the static side
                with urllib.request.urlopen(address) as answer:
                    (static / f"{name.split()[0]}.html").write_bytes(answer.read())
            for asset in ("dashboard.js", "dashboard.css"):
                with urllib.request.urlopen(f"{base}static/{asset}") as answer:
                    (static / "static" / asset).write_bytes(answer.read())
            files, line = start([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                                 "--directory", str(static)], "Serving HTTP")
            files_base = f"http://127.0.0.1:{line.split('port ')[1].split()[0]}/"
            try:
                results = {}
                with open_browser() as driver:
                    load(driver, files_base)  # the browser's own first page, so that "cold" is the server's
                    for name, address in pages.items():
                        server_side = measure(driver, address, args.repeat)
                        static_side = measure(driver, f"{files_base}{name.split()[0]}.html", args.repeat)
                        results[name] = (server_side, static_side)
                rss = peak_mb(server.pid)
            finally:
                files.kill()
        finally:
            server.kill()
    failed = False
    for name, (ours, flat) in results.items():
        first = ours["cold"]
        ok = ours["paint"] < TARGET_S and ours["load"] < TARGET_S
        failed |= not ok
        print(f"{name:10} first paint {ours['paint']:.3f} s, loaded {ours['load']:.3f} s (median of {args.repeat}); "
              f"the same HTML as a static file: {flat['paint']:.3f} s, {flat['load']:.3f} s; ratio of load times "
              f"{ours['load'] / flat['load']:.2f} [{'PASS' if ok else 'FAIL'} < {TARGET_S:g} s]")
        print(f"{'':10} first visit after the server started: painted {first['paint'] / 1000:.3f} s, loaded "
              f"{first['load'] / 1000:.3f} s, answered at {first['response'] / 1000:.3f} s (static file: "
              f"{flat['cold']['load'] / 1000:.3f} s); {ours['nodes']} tree nodes on the page")
    print(f"peak RSS of the dashboard server: {rss:.0f} MB [{'PASS' if rss < TARGET_MB else 'FAIL'} "
          f"< {TARGET_MB:g} MB]")
    failed |= rss >= TARGET_MB
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
