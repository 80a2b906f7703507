"""Gateway sessions: who may call, booked to which node and role, which models, and until when.

A session key is the only credential agent code holds. It books calls to one (run, node, role),
may call only the models of its role (task and try: the task model; meta: the meta model;
grader, judge: theirs), and lives as long as its sandbox: once that sandbox is closed (or gone),
or the key is revoked, every request with it is refused with 401. Its counts stay readable, so
the loop still learns what the session did after its sandbox closed.

A key is "gw-" and 32 URL-safe characters from `secrets` (192 bits): it cannot be guessed, and
its shape is what `redact` finds in text a later sandbox will read (feedback/<node>/), whichever
gateway, run or process made it. Redaction is the second line: a key an agent wrote in another
form (reversed, encoded) passes it, and is refused because its sandbox closed before any later
sandbox could read it.
"""

from __future__ import annotations

import re
import secrets
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.gateway.params import Refusal

if TYPE_CHECKING:
    from services.sandbox.base import Sandbox

KEY_PREFIX = "gw-"
KEY_PATTERN = re.compile(r"gw-[A-Za-z0-9_-]{32}")
REDACTED = "gw-[redacted]"


def redact(text: str) -> str:
    """`text` with every gateway key (of any gateway: they share one shape) replaced by REDACTED."""
    return KEY_PATTERN.sub(REDACTED, text)


@dataclass
class Session:
    run_id: str
    node: str
    role: str
    models: frozenset = frozenset()  # the provider strings this session may call
    max_calls: int | None = None  # e.g. the meta agent's tool-call limit, which its own code could drop
    calls: int = 0
    answered: int = 0  # calls answered (from the cache too)
    provider_failures: int = 0  # calls that failed at the provider, or were refused once the breaker tripped
    failed_model: str | None = None  # the model of the last such failure
    budget_refused: int = 0  # calls refused because the run's budget could not hold them
    revoked: str | None = None  # why its key is refused now
    # a weak reference to the sandbox it lives in
    sandbox: Callable[[], object] | None = field(default=None, repr=False, compare=False)

    def why_revoked(self) -> str | None:
        """Why the key no longer answers (revoked, or its sandbox closed), or None while it does."""
        if self.revoked is None and self.sandbox is not None:
            box = self.sandbox()
            if box is None or getattr(box, "closed", True):
                self.revoked = "its sandbox closed"
        return self.revoked


class Sessions:
    """The sessions of one gateway, by key; a key it never made is unknown, one it revoked stays known."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._lock = threading.Lock()
        self._by_key: dict[str, Session] = {}

    def new(self, node: str, role: str, models: frozenset, max_calls: int | None,
            sandbox: Sandbox | None = None) -> str:
        if not models:
            raise ValueError(f"a session of role {role} needs the models it may call")
        key = KEY_PREFIX + secrets.token_urlsafe(24)
        ref = weakref.ref(sandbox) if sandbox is not None else None
        with self._lock:
            self._by_key[key] = Session(self.run_id, node, role, models, max_calls, sandbox=ref)
        return key

    def get(self, key: str) -> Session | None:
        """The session of `key`, revoked or not (None for a key this gateway never made)."""
        with self._lock:
            return self._by_key.get(key)

    def live(self, key: str) -> Session:
        """The session of `key`; a 401 Refusal for a key this gateway never made or no longer honours."""
        session = self.get(key)
        if session is None:
            raise Refusal(401, "unknown gateway key", "authentication_error")
        why = session.why_revoked()
        if why:
            raise Refusal(401, f"this gateway key was revoked: {why}", "authentication_error")
        return session

    def revoke(self, key: str, why: str = "revoked by the run") -> None:
        session = self.get(key)
        if session is not None and session.revoked is None:
            session.revoked = why

    @staticmethod
    def refuse_model(session: Session, requested: str) -> Refusal:
        allowed = ", ".join(sorted(session.models))
        return Refusal(403, f"model {requested[:200]!r} is not allowed for this key: role {session.role} may call "
                            f"only {allowed}", "permission_error")
