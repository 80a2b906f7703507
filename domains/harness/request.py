"""One harness run as it is asked for, typed: `python -m domains.harness` makes it from its flags,
`hyperagents.evaluate` from its arguments, and the harness reads nothing else (no argparse past the command
line). Each field is the flag of the same name; None is "not given", so a config's or a resumed run's value
applies."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class EvalRequest:
    domain: str | None = None  # a registered domain's name (or domain_spec's)
    domain_spec: str | None = None  # a YAML spec of a domain of one's own, instead of `domain`
    data: tuple[str, ...] = ()  # DOMAIN=PATH: data files of domains that are not bundled
    agent_path: str = "task_agent"  # a .py file or a module path with a TaskAgent
    output_dir: str | Path = "./outputs"  # parent folder of run folders
    run_id: str | None = None  # the run folder's name (None: a timestamp)
    num_samples: int | None = None  # first N rows; -1 all (None: all, or a resume's own)
    save_interval: int | None = None  # rewrite predictions.csv every N rows
    num_workers: int | None = None  # rows evaluated in parallel
    resume_from: str | Path | None = None  # an earlier output folder to complete
    subset: str | None = None  # the split or the seed's suffix (None: the domain's, or a resume's own)
    proofs_dname: str | None = None  # imo_proof_grading: a run folder whose proofs to grade
    model: str | None = None  # a litellm model string or a role alias of the config
    config: str | Path | None = None  # a YAML config over configs/default.yaml
    settings: tuple = ()  # SECTION.KEY=VALUE texts or (SECTION.KEY, value) pairs, after `config`
    budget_usd: float | None = None
    budget_tokens: int | None = None
    sandbox: str | None = None  # the sandbox backend (None: the config's)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EvalRequest:
        """The request the command line's parsed flags make."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        return cls(**{**values, "data": tuple(args.data or ()), "settings": tuple(args.settings or ())})

    @classmethod
    def options(cls) -> list[str]:
        """The names a caller may give (the flags' names)."""
        return [f.name for f in fields(cls)]
