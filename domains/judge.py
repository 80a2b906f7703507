"""LLM judges for answers no rule can check (AMO-Bench's description answers).

Every call goes through a gateway, booked to role `judge`: the run's own gateway inside
the loop, or one this object opens (its ledger in `folder`) for a standalone report.
Judges vote at temperature 1, so five calls are five opinions, never one cached answer.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from services.startup import open_services


class GatewayJudge:
    def __init__(self, config, gateway=None, node: str = "report", folder: Path | None = None):
        self.config = config
        self.gateway = gateway
        self.node = node
        self.folder = folder
        self._own = contextlib.ExitStack()  # what this judge opened itself
        self._key = None
        self._lock = threading.Lock()

    def __call__(self, prompt: str) -> str:
        import litellm

        gateway, key = self._session()
        response = litellm.completion(model="openai/judge", api_base=gateway.url, api_key=key, num_retries=0,
                                      temperature=1.0, messages=[{"role": "user", "content": prompt}])
        return response.choices[0].message.content or ""

    def _session(self):
        with self._lock:
            if self._key is None:
                if self.gateway is None:
                    self.gateway = self._own.enter_context(open_services(self.config, self.folder, ["judge"])).gateway
                self.gateway.allow_models("judge")
                self._key = self.gateway.new_session(self.node, "judge")
            return self.gateway, self._key

    def close(self) -> None:
        """Stop the gateway this judge opened, if it opened one."""
        self._own.close()
