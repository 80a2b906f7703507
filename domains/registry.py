"""The domains a run can name: the IMO-Bench ones and the final-answer ones, by name."""

from __future__ import annotations

from domains import answer_domains
from domains.base import Domain
from domains.imo import domains as imo_domains
from services.errors import UserError


def _checked(domain: Domain) -> Domain:
    leaked = set(domain.inputs.values()) & set(domain.hidden_columns)
    if leaked:
        raise ValueError(f"domain {domain.name} would send hidden columns {sorted(leaked)} to the agent")
    return domain


DOMAINS: dict[str, Domain] = {d.name: _checked(d) for d in (*imo_domains.DOMAINS, *answer_domains.DOMAINS)}


def get_domain(name: str) -> Domain:
    if name not in DOMAINS:
        raise UserError(f"unknown domain {name!r} (known: {', '.join(sorted(DOMAINS))})")
    return DOMAINS[name]
