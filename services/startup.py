"""The start-up every entry point shares: keys, models and credentials, then the gateway.

    services = open_services(config, run_dir, ["task"])  # .env read, `auto` models chosen, keys checked
    print(services.why_models)                             # why `auto` became these models (or None)
    with services:                                         # run_dir made, the gateway started
        ... services.gateway ...
    # here the gateway is stopped and its ledger closed

The checks come first and make nothing, so a missing key stops an entry point before any
folder exists; an entry point prints its plan between the two steps. One that starts a
sandboxed worker may check its models with `services.require(...)` once the worker is on its
way instead (both import litellm, for seconds); a failed check then removes what was made.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from services.config import ROLE_ALIASES, Config
from services.errors import UserError
from services.gateway import open_gateway
from services.local_model import READY_PROMPT, is_local
from services.providers import check_credentials, choose_models, load_dotenv_file


class Services:
    """The gateway of one run folder (its ledger in `run_dir/ledger.sqlite`, run id the folder's
    name), open between `__enter__` and `__exit__`; made by open_services."""

    def __init__(self, config: Config, run_dir: Path, why_models: str | None, preflight: bool) -> None:
        self.config = config
        self.run_dir = run_dir
        self.why_models = why_models  # why the `auto` roles became their models, or None
        self.preflight = preflight
        self.models: set[str] = set()  # provider strings the run calls
        self.gateway = None
        self._ray = None  # with sandbox.executor ray: the run's hold on the cluster (services/sandbox/ray_backend.py)

    def require(self, *models: str) -> list[str]:
        """The models (provider strings or role aliases) this run will call, resolved; UserError
        naming the missing variable when one cannot be called from here."""
        resolved = sorted({self.config.resolve_model(m) for m in models})
        for model in resolved:
            check_credentials(model)
        self.models.update(resolved)
        if self.gateway is not None:  # required after the start (see open_services)
            self.gateway.allow_models(*resolved)
        return resolved

    def why_line(self, requested: str, flag: str) -> str | None:
        """The line telling why `requested` became its model, when it is a role alias that `auto`
        filled (`flag` is how to choose another), else None."""
        if self.why_models and requested in ROLE_ALIASES:
            return (f"model {self.config.resolve_model(requested)}, chosen because {self.why_models}; "
                    f"override with {flag}")
        return None

    def __enter__(self) -> Services:
        created = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.gateway = open_gateway(self.config, self.run_dir, run_id=self.run_dir.name)
        try:
            self.gateway.allow_models(*self.models)
            if self.preflight:
                self.gateway.preflight(sorted(self.models))
                self._check_local_models()
            if self.config.sandbox.executor == "ray":  # sandboxes on the cluster's nodes reach this gateway
                from services.sandbox.ray_backend import connect

                self._ray = connect(self.config, self.gateway.unix_socket)
                self._ray.__enter__()
        except BaseException:  # a failed check, or Ctrl-C while the local model's server starts
            self.close()
            if created:  # nothing was made yet: leave no folder behind
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_local_models(self) -> None:
        """One real completion of each local model through the gateway (Gateway.preflight calls only
        providers): it starts the model's server, which must answer, so a server that crashes on this
        machine (SIGSEGV, SIGILL) stops the run here with one line, before the first generation."""
        local = [model for model in sorted(self.models) if is_local(model)]
        if not local:
            return
        assert self.gateway is not None, "services not started"
        key = self.gateway.new_session("preflight", "preflight", local)
        try:
            for model in local:
                # Loading and a first answer take seconds, more on a busy machine: said, so the run is not silent.
                print(f"local    {model}: starting its server (llama.cpp) and asking it one question", flush=True)
                started = time.monotonic()
                # A seed of its own: an answer replayed from the cache (gateway.cache: all) would start no server.
                reply = self.gateway.handle_chat(key, {"model": model, "messages": READY_PROMPT, "max_tokens": 4,
                                                       "seed": secrets.randbelow(2**31)})
                if reply.status != 200:
                    raise UserError(reply.body["error"]["message"])
                print(f"local    {model}: ready in {time.monotonic() - started:.1f} s", flush=True)
        finally:
            self.gateway.revoke(key)

    def close(self) -> None:
        if self._ray is not None:
            self._ray, ray = None, self._ray
            ray.__exit__(None, None, None)
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway.ledger.close()
            self.gateway = None


def choose_run_models(config: Config) -> str | None:
    """Read `.env`, then fill the model roles of `config` set to `auto` from the keys now set;
    returns why those models, or None when no role was `auto`. The first step of open_services,
    alone for an entry point that names models but calls none (setup_proofgrader_repo)."""
    load_dotenv_file()
    return choose_models(config.models)


def open_services(config: Config, run_dir: Path, models: Iterable[str] = (), *, preflight: bool = False) -> Services:
    """Read `.env`, fill the model roles set to `auto` in `config`, and check that every model of
    `models` (provider strings or role aliases; more with `require`) can be called from here.

    The check imports litellm (seconds). An entry point that starts a sandboxed worker, whose
    own import of litellm takes as long, passes no `models` and calls `require` once the worker
    is on its way, so both imports run at once; a failed check then leaves no folder either
    (`domains.harness`: its run folder is removed when nothing finished in it).

    Entering the result makes `run_dir` and starts the gateway there, with those models allowed;
    with `preflight`, one tiny call to each first (a bad key or model name stops the start, and
    a folder made for it is removed again).
    """
    services = Services(config, Path(run_dir), choose_run_models(config), preflight)
    services.require(*models)
    return services
