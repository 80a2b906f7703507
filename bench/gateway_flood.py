"""A sandbox flooding the run's gateway: half-open connections, and refused requests.

Starts a real gateway (forwarding to a FakeOpenAI server) in this process and, through its Unix
socket as a sandbox reaches it:
  connections: opens N connections that send nothing, then measures the host's threads and RSS,
               closes them, and counts the tracebacks the gateway printed on stderr;
  refusals:    sends refused requests (a key the gateway never made) for S seconds, reconnecting
               whenever the gateway closes the connection, then measures the ledger's rows and bytes.

    python bench/gateway_flood.py --connections 3000 --seconds 15
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from contextlib import redirect_stderr
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from services.config import Config  # noqa: E402
from services.gateway import open_gateway  # noqa: E402
from support.fake_openai import FakeOpenAI  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def connection_flood(gw, n: int) -> dict:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # both ends of every connection are in this process
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * n + 512), hard))
    threads0, rss0 = threading.active_count(), rss_mb()
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # blocking: waits while the backlog is full
        s.settimeout(None)
        try:
            s.connect(str(gw.unix_socket))
        except OSError:
            s.close()
            continue
        socks.append(s)
    time.sleep(2)
    threads1, rss1 = threading.active_count(), rss_mb()
    for s in socks:
        s.close()
    time.sleep(2)
    return {"connected": len(socks), "threads_before": threads0, "threads_during": threads1,
            "rss_added_mb": round(rss1 - rss0, 1)}


def refusal_flood(gw, seconds: float) -> dict:
    body = json.dumps({"model": "openai/fake", "messages": [{"role": "user", "content": "x"}]}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer gw-nobody\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    sent = closed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(str(gw.unix_socket))
            f = s.makefile("rb")
            while time.monotonic() < end:
                s.sendall(request)
                sent += 1
                status = f.readline()
                if not status:
                    closed += 1
                    break
                length = 0
                while (line := f.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                f.read(length)
        except OSError:
            closed += 1
        finally:
            s.close()
    ledger = gw.ledger.path
    with sqlite3.connect(ledger) as db:
        tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = sum(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables if t != "cache")
    size = sum(p.stat().st_size for p in ledger.parent.glob(ledger.name + "*"))
    return {"requests_sent": sent, "connections_closed_by_gateway": closed, "ledger_rows": rows,
            "ledger_bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    err = io.StringIO()
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as tmp, redirect_stderr(err):
        os.environ.update(OPENAI_API_BASE=fake.base_url, OPENAI_API_KEY="sk-bench")
        gw = open_gateway(Config(), tmp, "bench")
        try:
            result = {"connections": connection_flood(gw, args.connections),
                      "refusals": refusal_flood(gw, args.seconds)}
        finally:
            gw.stop()
            gw.ledger.close()
    result["tracebacks_on_stderr"] = err.getvalue().count("Traceback")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
