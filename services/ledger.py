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

from services.errors import UserError
from services.plain_data import show
from services.sqlite_files import odd_file, readable, sibling_files

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
        check_ledger(self.path)  # a resumed run's ledger may come from someone else's folder
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


class NotALedger(UserError):
    """A ledger.sqlite this project did not write (a view, a trigger, a table of another shape), or one
    that cannot be read within READ_SECONDS: one line naming the file."""


READ_SECONDS = 3.0  # one query of a reader, with any copy it makes; a ledger this project wrote needs well under that
MAX_ROWS = 10_000  # rows one query of a reader returns (per role and model, per reason, per time bucket)
MAX_SCHEMA = 64  # entries of sqlite_master a ledger may have (it has 3 tables and 2 keys' indexes)
MAX_TEXT = 500  # characters of a role, model or message a reader returns
# Each table a ledger holds, with the columns of its first shape (required) and those added since.
_TABLES = {"calls": ({"id", "ts", "run_id", "node", "role", "model", "prompt_tokens", "completion_tokens", "cost_usd",
                     "latency_s", "cache_hit", "attempts", "error"}, set(_ADDED_COLUMNS)),
           "refusals": ({"run_id", "node", "role", "reason", "count", "message", "first_ts", "last_ts"}, set()),
           "cache": ({"key", "response", "cost_usd"}, set())}


def _check_files(path: Path, writer: bool = False) -> bool:
    """Whether the ledger exists; NotALedger when it or a file SQLite would open beside it is not a plain
    file (services.sqlite_files.odd_file)."""
    for file in sibling_files(path):
        if (odd := odd_file(file, writer)) is not None:
            raise NotALedger(f"{path}: not a ledger this project wrote: {odd}")
    return path.exists()


def _tables(db: sqlite3.Connection, path: Path) -> dict[str, set[str]]:
    """The ledger's tables and their columns, after checking that it holds only tables and columns this
    project makes: no view (whose query could run for ever), trigger, virtual table or generated column."""
    entries = db.execute("SELECT type, name, tbl_name, substr(sql, 1, 40) FROM sqlite_master LIMIT ?",
                         (MAX_SCHEMA + 1,)).fetchall()
    if len(entries) > MAX_SCHEMA:
        raise NotALedger(f"{path}: not a ledger this project wrote: more than {MAX_SCHEMA} schema entries")
    tables: dict[str, set[str]] = {}
    for kind, name, table, sql in entries:
        if kind == "index" and str(name).startswith("sqlite_autoindex_") and table in _TABLES:
            continue
        if kind != "table" or name not in _TABLES or not str(sql).upper().startswith("CREATE TABLE"):
            raise NotALedger(f"{path}: not a ledger this project wrote: it holds the {kind} {show(name)}")
        tables[name] = set()
    for name in tables:
        required, added = _TABLES[name]
        columns = {c: hidden for c, hidden in db.execute("SELECT name, hidden FROM pragma_table_xinfo(?)", (name,))}
        unknown = sorted(set(columns) - required - added) or sorted(c for c, hidden in columns.items() if hidden)
        if unknown:
            raise NotALedger(f"{path}: not a ledger this project wrote: table {name} has the column "
                             f"{show(unknown[0])}")
        if required - set(columns):
            raise NotALedger(f"{path}: not a ledger this project wrote: table {name} lacks the column "
                             f"{sorted(required - set(columns))[0]}")
        tables[name] = set(columns)
    return tables


def check_ledger(path: Path) -> None:
    """NotALedger unless the ledger at `path` (if any) is one this project wrote and none of its files is a
    hard link (SQLite would write its other name, a `-shm` most of all): before a run writes to it."""
    _check_files(path, writer=True)
    LedgerReader(path).tables()


class LedgerReader:
    """A run's ledger read by someone else (the dashboard, an analysis, a run handed over), as it may be
    being written: never a write, never a lock that holds the run up, never a file made in the run's
    folder; only tables of the shape this project writes; each query within READ_SECONDS (the copy of a `-wal`
    that has no `-shm` included) and MAX_ROWS.

    Opening it writes nothing beside it (services.sqlite_files.readable), so a planted `-shm` that is a hard
    link to a file of the user is never truncated; a running run's calls are still seen as they are booked."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _query(self, sql: str | None = None, args: tuple = (),
               table: str = "calls") -> tuple[dict[str, set[str]], list[tuple]]:
        """The ledger's tables with their columns, checked, and at most MAX_ROWS rows of `sql` (none when the
        ledger or `table` is not there, or the run holds it mid-checkpoint); NotALedger otherwise."""
        deadline = time.monotonic() + READ_SECONDS  # one budget: the copy readable may make, then the query
        if not _check_files(self.path):
            return {}, []
        try:
            with readable(self.path, deadline) as uri:
                return self._query_at(uri, sql, args, table, deadline)
        except NotALedger:
            raise
        except TimeoutError as e:
            raise NotALedger(f"{self.path}: not a ledger this project wrote: not read within {READ_SECONDS:g} s "
                             f"({e})") from None
        except OSError as e:
            raise NotALedger(f"{self.path}: not a ledger this project wrote: {e}") from None

    def _query_at(self, uri: str, sql: str | None, args: tuple, table: str,
                  deadline: float) -> tuple[dict[str, set[str]], list[tuple]]:
        try:
            db = sqlite3.connect(uri, uri=True, timeout=2.0)
        except sqlite3.Error as e:
            raise NotALedger(f"{self.path}: not a ledger this project wrote: {e}") from None
        try:
            db.text_factory = lambda data: data.decode("utf-8", "replace")
            db.set_progress_handler(lambda: time.monotonic() > deadline, 1000)  # True ends the query
            db.execute("PRAGMA query_only=1")
            db.execute("PRAGMA trusted_schema=0")
            tables = _tables(db, self.path)
            rows = db.execute(sql, args).fetchmany(MAX_ROWS + 1) if sql and table in tables else []
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):  # a run's checkpoint: shown as empty, read again later
                return {}, []
            why = f"not read within {READ_SECONDS:g} s" if "interrupt" in str(e) else str(e)
            raise NotALedger(f"{self.path}: not a ledger this project wrote: {why}") from None
        except sqlite3.Error as e:
            raise NotALedger(f"{self.path}: not a ledger this project wrote: {e}") from None
        finally:
            db.close()
        if len(rows) > MAX_ROWS:
            raise NotALedger(f"{self.path}: not a ledger this project wrote: over {MAX_ROWS} rows of {table}")
        return tables, rows

    def tables(self) -> set[str]:
        """The ledger's tables, checked (none when there is no ledger yet); NotALedger otherwise."""
        return set(self._query()[0])

    def _rows(self, sql: str, args: tuple = (), kinds: str = "", table: str = "calls") -> list[tuple]:
        """`_query`'s rows, each value of the kind `kinds` names by position (s: text, n: a number)."""
        rows = self._query(sql, args, table)[1]
        for row in rows:
            for value, kind in zip(row, kinds):
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if kind == "s" and not isinstance(value, str) or kind == "n" and not number:
                    raise NotALedger(f"{self.path}: not a ledger this project wrote: {show(value)} in table {table}")
        return rows

    def spend(self, node: str | None = None) -> list[dict]:
        """Calls, tokens and dollars per (role, model), of one node or of the whole run, with the prompt
        tokens read from and written to providers' caches and what that saved (0 in a ledger older than
        those columns: a reader never migrates)."""
        where, args = ("WHERE node = ? AND (error IS NULL OR error NOT GLOB ?)", (node, f"{REFUSED}*")) \
            if node is not None else ("WHERE error IS NULL OR error NOT GLOB ?", (f"{REFUSED}*",))
        have = self._query()[0].get("calls", set())
        added = ", ".join(f"COALESCE(SUM({c}),0)" if c in have else "0" for c in _ADDED_COLUMNS)
        rows = self._rows(f"SELECT substr(role, 1, {MAX_TEXT}), substr(model, 1, {MAX_TEXT}), COUNT(*), "
                          "COALESCE(SUM(prompt_tokens),0), COALESCE(SUM(completion_tokens),0), "
                          "COALESCE(SUM(cost_usd),0), COALESCE(SUM(cache_hit),0), COALESCE(SUM(error IS NOT NULL),0), "
                          f"{added} FROM calls {where} GROUP BY role, model ORDER BY MIN(id)", args, "ss" + "n" * 9)
        keys = ("role", "model", "calls", "prompt_tokens", "completion_tokens", "cost_usd", "cache_hits", "errors",
                *_ADDED_COLUMNS)
        return [dict(zip(keys, r)) for r in rows]

    def refusals(self, node: str | None = None) -> list[dict]:
        """Refused requests per (role, reason), of one node or of the whole run: count and last message
        (those of a ledger older than the refusals table are counted by reason from their rows)."""
        where, args = ("AND node = ?", (node,)) if node is not None else ("", ())
        rows = self._rows(f"SELECT substr(role, 1, {MAX_TEXT}), substr(reason, 1, {MAX_TEXT}), SUM(count), "
                          f"substr(MAX(message), 1, {MAX_TEXT}) FROM refusals WHERE 1 {where} "
                          "GROUP BY role, reason ORDER BY MIN(first_ts)", args, "ssns", "refusals")
        rows += self._rows(f"SELECT substr(role, 1, {MAX_TEXT}), SUBSTR(error, 10, 3), COUNT(*), "
                           f"substr(MAX(error), 1, {MAX_TEXT}) FROM calls WHERE error GLOB ? {where} GROUP BY 1, 2 "
                           "ORDER BY MIN(id)", (f"{REFUSED}*", *args), "ssns")
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
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in span[0]):
            raise NotALedger(f"{self.path}: not a ledger this project wrote: a call's time is {show(span[0][0])}")
        start, end = min(span[0]), max(span[0])
        step = max((end - start) / max(points - 1, 1), 1e-9)
        rows = self._rows(f"SELECT CAST((ts - ?) / ? AS INTEGER), substr(role, 1, {MAX_TEXT}), "
                          f"substr(model, 1, {MAX_TEXT}), COALESCE(SUM({summed}),0) FROM calls GROUP BY 1, 2, 3",
                          (start, step), "nssn")
        series: dict[str, list[float]] = {}
        for bucket, role, model, amount in rows:
            series.setdefault(f"{role} · {model}", [0.0] * points)[min(max(int(bucket), 0), points - 1)] += amount
        for values in series.values():
            for i in range(1, points):
                values[i] += values[i - 1]
        return [start + i * step for i in range(points)], series
