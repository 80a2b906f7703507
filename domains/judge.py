"""LLM judges for answers no rule can check (AMO-Bench's description answers).

Every call goes through a gateway, booked to role `judge`: the run's own gateway inside
the loop, or one this object opens (its ledger in `folder`) for a standalone report.
Judges vote at temperature 1, so five calls are five opinions, never one cached answer.
"""

from __future__ import annotations

import threading
from pathlib import Path


class GatewayJudge:
    def __init__(self, config, gateway=None, node: str = "report", folder: Path | None = None):
        self.config = config
        self.gateway = gateway
        self.node = node
        self.folder = folder
        self._own = None
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
                    from services.gateway import open_gateway
                    from services.providers import (
                        check_credentials,
                        choose_models,
                        load_dotenv_file,
                    )

                    load_dotenv_file()
                    choose_models(self.config.models)
                    check_credentials(self.config.resolve_model("judge"))
                    self.gateway = self._own = open_gateway(self.config, self.folder, run_id=self.folder.name)
                self.gateway.allow_models("judge")
                self._key = self.gateway.new_session(self.node, "judge")
            return self.gateway, self._key

    def close(self) -> None:
        if self._own is not None:
            self._own.stop()
            self._own.ledger.close()
            self._own = None
