"""The ledger: one SQLite row per model call, and the response cache.

It is the single record of what a run spent. SQLite gives atomic appends, so a run
killed mid-call loses at most that call, and a resumed run reads its totals back.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    run_id TEXT NOT NULL,
    node TEXT NOT NULL,
    role TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    latency_s REAL NOT NULL DEFAULT 0,
    cache_hit INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 1,
    error TEXT
);
CREATE TABLE IF NOT EXISTS cache (
    key TEXT PRIMARY KEY,
    response TEXT NOT NULL,
    cost_usd REAL NOT NULL
);
"""


@dataclass
class Call:
    run_id: str
    node: str
    role: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cache_hit: bool = False
    attempts: int = 1
    error: str | None = None


# How the error of a request the gateway refused (bad key, field, model, budget) starts: such a
# row is no model call, costs nothing, and is counted apart from the provider's errors.
REFUSED = "refused:"

_CALL_FIELDS = [f.name for f in fields(Call)]
_INSERT_CALL = (f"INSERT INTO calls (ts, {', '.join(_CALL_FIELDS)}) "
                f"VALUES ({', '.join('?' * (len(_CALL_FIELDS) + 1))})")


@dataclass
class Totals:
    calls: int = 0  # model calls, cache hits included; refused requests are not calls
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    errors: int = 0  # calls that failed at the provider
    refused: int = 0  # requests the gateway refused without calling a provider

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def record(self, call: Call) -> None:
        values = [time.time(), *(getattr(call, name) for name in _CALL_FIELDS)]  # flat: asdict would deep-copy
        with self._lock:
            self._db.execute(_INSERT_CALL, values)

    def totals(self, **where: str) -> Totals:
        """Sums over calls matching column=value filters, e.g. totals(run_id=..., node=...)."""
        clause = " AND ".join(f"{k} = ?" for k in where) or "1"
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(prompt_tokens),0), COALESCE(SUM(completion_tokens),0),"
                " COALESCE(SUM(cost_usd),0), COALESCE(SUM(cache_hit),0), COALESCE(SUM(error IS NOT NULL),0),"
                f" COALESCE(SUM(error GLOB '{REFUSED}*'),0) FROM calls WHERE {clause}",
                list(where.values()),
            ).fetchone()
        rows, prompt, completion, cost, hits, failed, refused = row
        return Totals(rows - refused, prompt, completion, cost, hits, failed - refused, refused)

    def roles(self, **where: str) -> list[str]:
        """The roles of the calls matching column=value filters, in the order they first appear."""
        clause = " AND ".join(f"{k} = ?" for k in where) or "1"
        with self._lock:
            rows = self._db.execute(f"SELECT role FROM calls WHERE {clause} GROUP BY role ORDER BY MIN(id)",
                                    list(where.values())).fetchall()
        return [r[0] for r in rows]

    def calls(self, **where: str) -> list[dict]:
        clause = " AND ".join(f"{k} = ?" for k in where) or "1"
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM calls WHERE {clause} ORDER BY id", list(where.values()))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def cache_get(self, key: str) -> tuple[str, float] | None:
        with self._lock:
            return self._db.execute("SELECT response, cost_usd FROM cache WHERE key = ?", (key,)).fetchone()

    def cache_put(self, key: str, response: str, cost_usd: float) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO cache VALUES (?, ?, ?)", (key, response, cost_usd))

    def close(self) -> None:
        with self._lock:
            self._db.close()
