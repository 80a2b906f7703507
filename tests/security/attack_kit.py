"""Shared pieces of the attack suite (tests/security/): a loopback tripwire, host start-up hooks.

Every test marked `@pytest.mark.attack("...")` is one attack; SECURITY.md's table lists
them all (tests/security/test_security_md.py checks that it does). Import fixtures from
here by name (`from attack_kit import tripwire`).
"""

import contextlib
import site
import socket
import threading
from pathlib import Path

import pytest


class Tripwire:
    """A TCP listener on the host's loopback (IPv4 and, where there is one, IPv6) that counts
    every connection made to it: sandboxed code must never reach the host's network."""

    def __init__(self):
        self.connections = 0
        self._lock = threading.Lock()
        self._sockets = []
        self.port = None
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with contextlib.suppress(OSError):
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, self.port or 0))
                sock.listen(16)
                self.port = self.port or sock.getsockname()[1]
                self._sockets.append(sock)
                threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            conn.close()

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


@pytest.fixture(scope="module")
def tripwire():
    wire = Tripwire()
    yield wire
    wire.close()


def startup_hooks() -> set[Path]:
    """The .pth files of this interpreter's site-packages (a host `python` runs them at start)."""
    return {p for folder in site.getsitepackages() for p in Path(folder).glob("*.pth")}
