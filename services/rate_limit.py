"""Client-side limits on provider calls: how many at once, and how many a minute per model.

Providers answer an excess with 429s, which the gateway retries with backoff; a run
that knows its tier's limits does better to stay under them than to spend its retries
(and its wall clock) finding them. Calls wait for a slot; nothing is refused.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator


class Window:
    """At most `limit` starts in any `seconds`-long window (a sliding log of start times)."""

    def __init__(self, limit: int, seconds: float = 60.0) -> None:
        self.limit = limit
        self.seconds = seconds
        self._starts: deque[float] = deque()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Wait until a start is allowed, and take it."""
        while True:
            with self._lock:
                now = time.monotonic()
                while self._starts and now - self._starts[0] >= self.seconds:
                    self._starts.popleft()
                if len(self._starts) < self.limit:
                    self._starts.append(now)
                    return
                delay = self._starts[0] + self.seconds - now
            time.sleep(delay)


class CallLimits:
    """The gateway's limits: `max_concurrent` calls in flight over all models (None = any
    number), and `per_minute` starts per model (None = any number)."""

    def __init__(self, max_concurrent: int | None, per_minute: int | None, window_s: float = 60.0) -> None:
        self._in_flight = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None
        self._per_minute = per_minute
        self._window_s = window_s
        self._windows: dict[str, Window] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def slot(self, model: str) -> Iterator[None]:
        """Hold a provider call's slot for `model`, waiting for one first."""
        if self._in_flight:
            self._in_flight.acquire()
        try:
            if self._per_minute:
                with self._lock:
                    window = self._windows.setdefault(model, Window(self._per_minute, self._window_s))
                window.acquire()
            yield
        finally:
            if self._in_flight:
                self._in_flight.release()
