"""The ledger: one SQLite row per model call, refused requests counted per (node, role, reason),
and the response cache.

It is the single record of what a run spent. SQLite gives atomic appends, so a run
killed mid-call loses at most that call, and a resumed run reads its totals back.
A refused request is no call and costs nothing: it adds one to its (run, node, role, reason)
row of `refusals`, updated in place, so a flood of them does not grow the file. Ledgers
written before that table existed have their refusals as rows of `calls` whose error starts
with REFUSED; every reader here counts both.

A call's prompt tokens include those the provider read from its prompt cache (`cached_tokens`)
and wrote to it (`cache_write_tokens`); its cost prices them at the model's cached rates, and
`cache_saved_usd` is what that saved against the whole prompt at the input price (less than 0
where writes cost more than reads saved). Ledgers written before these columns get them, as 0,
when a run opens them again (`_migrate`); `LedgerReader` reads them as 0 where they are missing.
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
    error TEXT,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cache_saved_usd REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS refusals (
    run_id TEXT NOT NULL,
    node TEXT NOT NULL,
    role TEXT NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    message TEXT NOT NULL,
    first_ts REAL NOT NULL,
    last_ts REAL NOT NULL,
    PRIMARY KEY (run_id, node, role, reason)
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
    cached_tokens: int = 0  # prompt tokens the provider read from its prompt cache
    cache_write_tokens: int = 0  # prompt tokens the provider wrote to its prompt cache
    cache_saved_usd: float = 0.0  # the prompt at the input price, less what its cached tokens cost


# Columns added to `calls` since its first shape, with their declarations: added to older ledgers.
_ADDED_COLUMNS = {"cached_tokens": "INTEGER NOT NULL DEFAULT 0", "cache_write_tokens": "INTEGER NOT NULL DEFAULT 0",
                  "cache_saved_usd": "REAL NOT NULL DEFAULT 0"}
# What LedgerReader.spend_over_time can add up, by name: the SQL it sums (fixed text, never a caller's).
_OVER_TIME = {"dollars": "cost_usd", "tokens": "prompt_tokens + completion_tokens"}


# How the error of a request the gateway refused (bad key, field, model, budget) started in ledgers
# that booked each as a row of `calls`: such a row is no model call, costs nothing, and is counted
# apart from the provider's errors.
REFUSED = "refused:"
_REFUSE = ("INSERT INTO refusals VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, node, role, reason) DO UPDATE "
           "SET count = count + excluded.count, message = excluded.message, last_ts = excluded.last_ts")

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
    cached_tokens: int = 0  # prompt tokens read from a provider's prompt cache (part of prompt_tokens)
    cache_write_tokens: int = 0  # prompt tokens written to a provider's prompt cache (part of prompt_tokens)
    cache_saved_usd: float = 0.0  # what prompt caching saved against the input price

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Ledger:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns of `_ADDED_COLUMNS` a ledger of an older run lacks (each ALTER is atomic)."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(calls)")}
        for name, declaration in _ADDED_COLUMNS.items():
            if name not in have:
                self._db.execute(f"ALTER TABLE calls ADD COLUMN {name} {declaration}")

    def record(self, call: Call) -> None:
        values = [time.time(), *(getattr(call, name) for name in _CALL_FIELDS)]  # flat: asdict would deep-copy
        with self._lock:
            self._db.execute(_INSERT_CALL, values)

    def refuse(self, run_id: str, node: str, role: str, reason: str, message: str, count: int = 1) -> None:
        """Add `count` refused requests to the row of (run, node, role, reason), keeping the last message."""
        now = time.time()
        with self._lock:
            self._db.execute(_REFUSE, (run_id, node, role, reason, count, message[:500], now, now))

    def totals(self, **where: str) -> Totals:
        """Sums over calls matching column=value filters, e.g. totals(run_id=..., node=...)."""
        clause = " AND ".join(f"{k} = ?" for k in where) or "1"
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(prompt_tokens),0), COALESCE(SUM(completion_tokens),0),"
                " COALESCE(SUM(cost_usd),0), COALESCE(SUM(cache_hit),0), COALESCE(SUM(error IS NOT NULL),0),"
                f" COALESCE(SUM(error GLOB '{REFUSED}*'),0), COALESCE(SUM(cached_tokens),0),"
                " COALESCE(SUM(cache_write_tokens),0), COALESCE(SUM(cache_saved_usd),0)"
                f" FROM calls WHERE {clause}",
                list(where.values()),
            ).fetchone()
            counted = self._db.execute(f"SELECT COALESCE(SUM(count),0) FROM refusals WHERE {clause}",
                                       list(where.values())).fetchone()[0]
        rows, prompt, completion, cost, hits, failed, refused, read, written, saved = row
        return Totals(rows - refused, prompt, completion, cost, hits, failed - refused, refused + counted, read,
                      written, saved)

    def refusals(self, **where: str) -> list[dict]:
        """The refusal counts matching column=value filters: run_id, node, role, reason, count, message, first_ts,
        last_ts."""
        clause = " AND ".join(f"{k} = ?" for k in where) or "1"
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM refusals WHERE {clause} ORDER BY first_ts", list(where.values()))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

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


class LedgerReader:
    """A run's ledger read by someone else (the dashboard), as it is being written: never a write,
    never a lock that holds the run up, never a file made in the run's folder.

    While the run writes, its WAL files exist and SQLite's read-only mode shares them; when they
    do not, opening read-only would make them, so the file is read as immutable instead."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection | None:
        if not self.path.is_file():
            return None
        live = Path(f"{self.path}-wal").exists()
        uri = f"{self.path.resolve().as_uri()}?{'mode=ro' if live else 'immutable=1'}"
        db = sqlite3.connect(uri, uri=True, timeout=2.0)
        db.execute("PRAGMA query_only=1")
        return db

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            db = self._connect()
        except sqlite3.Error:
            return []
        if db is None:
            return []
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.Error:  # a ledger caught mid-checkpoint, or not one: shown as empty, read again later
            return []
        finally:
            db.close()

    def spend(self, node: str | None = None) -> list[dict]:
        """Calls, tokens and dollars per (role, model), of one node or of the whole run, with the prompt
        tokens read from and written to providers' caches and what that saved (0 in a ledger older than
        those columns: a reader never migrates)."""
        where, args = ("WHERE node = ? AND (error IS NULL OR error NOT GLOB ?)", (node, f"{REFUSED}*")) \
            if node is not None else ("WHERE error IS NULL OR error NOT GLOB ?", (f"{REFUSED}*",))
        have = {row[0] for row in self._rows("SELECT name FROM pragma_table_info('calls')")}
        added = ", ".join(f"COALESCE(SUM({c}),0)" if c in have else "0" for c in _ADDED_COLUMNS)
        rows = self._rows("SELECT role, model, COUNT(*), COALESCE(SUM(prompt_tokens),0), "
                          "COALESCE(SUM(completion_tokens),0), COALESCE(SUM(cost_usd),0), COALESCE(SUM(cache_hit),0),"
                          f" COALESCE(SUM(error IS NOT NULL),0), {added} FROM calls {where} GROUP BY role, model "
                          "ORDER BY MIN(id)", args)
        keys = ("role", "model", "calls", "prompt_tokens", "completion_tokens", "cost_usd", "cache_hits", "errors",
                *_ADDED_COLUMNS)
        return [dict(zip(keys, r)) for r in rows]

    def refusals(self, node: str | None = None) -> list[dict]:
        """Refused requests per (role, reason), of one node or of the whole run: count and last message
        (those of a ledger older than the refusals table are counted by reason from their rows)."""
        where, args = ("AND node = ?", (node,)) if node is not None else ("", ())
        rows = self._rows(f"SELECT role, reason, SUM(count), MAX(message) FROM refusals WHERE 1 {where} "
                          "GROUP BY role, reason ORDER BY MIN(first_ts)", args)
        rows += self._rows("SELECT role, SUBSTR(error, 10, 3), COUNT(*), MAX(error) FROM calls WHERE error GLOB ? "
                           f"{where} GROUP BY 1, 2 ORDER BY MIN(id)", (f"{REFUSED}*", *args))
        return [dict(zip(("role", "reason", "count", "message"), r)) for r in rows]

    def spend_over_time(self, points: int = 120,
                        measure: str = "dollars") -> tuple[list[float], dict[str, list[float]]]:
        """Cumulative dollars (or, with `measure` "tokens", prompt + completion tokens) by "role · model" at
        `points` evenly spaced times of the run: the times (Unix seconds) and one series per role and model."""
        summed = _OVER_TIME[measure]
        # Calls are booked as they end, so ts grows with the row id: the first and last rows bound
        # the run's time without a scan of the table.
        span = self._rows("SELECT (SELECT ts FROM calls ORDER BY id LIMIT 1), (SELECT ts FROM calls ORDER BY id DESC "
                          "LIMIT 1)")
        if not span or span[0][0] is None:
            return [], {}
        start, end = min(span[0]), max(span[0])
        step = max((end - start) / max(points - 1, 1), 1e-9)
        rows = self._rows(f"SELECT CAST((ts - ?) / ? AS INTEGER), role, model, SUM({summed}) FROM calls "
                          "GROUP BY 1, 2, 3", (start, step))
        series: dict[str, list[float]] = {}
        for bucket, role, model, amount in rows:
            series.setdefault(f"{role} · {model}", [0.0] * points)[min(int(bucket), points - 1)] += amount or 0.0
        for values in series.values():
            for i in range(1, points):
                values[i] += values[i - 1]
        return [start + i * step for i in range(points)], series
