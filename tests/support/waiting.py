"""Polling until a condition holds: a process's output, a file written, a page's element drawn."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Calls condition every 0.05 s until it returns something truthy, and returns that; raises
    AssertionError("timed out waiting for {what}") once timeout seconds have passed without."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def process_gone(pid: int, timeout: float) -> bool:
    """Whether process `pid` is gone within `timeout` seconds (checked every 0.2 s); a process still there is
    left as it is: the caller kills it and says what outlived what."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
