"""The response cache: an answer kept in the ledger, replayed to the node and role that asks again.

Which requests are replayed is `gateway.cache`'s (caching.REPLAYS: temperature 0 only, all, none). A
resumed run replays what it paid for before, so it does not pay again.
"""

from __future__ import annotations

import hashlib
import json

from services.config import GatewayConfig
from services.gateway.caching import REPLAYS
from services.gateway.machine import LedgerWrites
from services.gateway.sessions import Session


class Replays:
    def __init__(self, gw: GatewayConfig, writes: LedgerWrites) -> None:
        self._gw = gw
        self._writes = writes

    def key(self, request: str, params: dict, session: Session) -> str | None:
        """The key a request's answer is cached under, or None when the cache mode does not replay it.

        Scoped to the node and role that asked: a generation redone after a kill (or a resumed
        evaluation) replays its own calls, but one generation never gets another's answer. Unscoped,
        every meta agent's first call (the same prompt each generation at temperature 0) would be
        the first one's reply again, and the search would repeat itself instead of sampling."""
        if not REPLAYS[self._gw.cache](params):
            return None
        return hashlib.sha256(f"{session.node}\0{session.role}\0{request}".encode()).hexdigest()

    def get(self, key: str | None) -> dict | None:
        """The answer kept under `key`, or None."""
        hit = key and self._writes.ledger.cache_get(key)
        return json.loads(hit[0]) if hit else None

    def put(self, key: str | None, payload: dict, cost_usd: float) -> None:
        if key:
            self._writes.cache_put(key, json.dumps(payload), cost_usd)
