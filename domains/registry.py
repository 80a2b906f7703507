"""The domains a run can name: the bundled ones (IMO-Bench, final answers), those of installed
plugins, and those written as a spec file (domains/spec.py), by name.

A plugin is a package with an entry point in the group `hyperagents_imo.domains`; the entry is a
`Domain`, a spec file's path, a list of them, or a function returning one of these:

    [project.entry-points."hyperagents_imo.domains"]
    capitals = "my_package.tasks:capitals"

A spec domain is known to this process once read: from `--domain_spec` (`use_domain_specs`),
or from a run's folder that kept it (`use_run_domains`, for a resumed run and for every reader
of finished runs). A run's folder may come from anyone, so what it kept never names code to run: a
domain scored by the user's own function scores only when the user names its spec file again
(checked to be the one the run kept), or when it is an installed plugin's; read from the folder
alone it shows its stored scores.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from domains import answer_domains
from domains.base import Domain
from domains.imo import domains as imo_domains
from domains.spec import DomainSpec, differs, read_spec, record_spec, run_specs, scorer_code
from services.errors import UserError

ENTRY_POINTS = "hyperagents_imo.domains"


def _checked(domain: Domain) -> Domain:
    leaked = set(domain.inputs.values()) & set(domain.hidden_columns)
    if leaked:
        raise ValueError(f"domain {domain.name} would send hidden columns {sorted(leaked)} to the agent")
    if domain.question_id in domain.hidden_columns:
        raise ValueError(f"domain {domain.name}: its row id {domain.question_id!r} is a hidden column")
    return domain


DOMAINS: dict[str, Domain] = {d.name: _checked(d) for d in (*imo_domains.DOMAINS, *answer_domains.DOMAINS)}
_specs: dict[str, tuple[DomainSpec, Domain]] = {}  # the spec domains this process read, by name
_lock = threading.Lock()  # the dashboard's server reads runs from several threads


@cache
def plugin_domains() -> dict[str, Domain]:
    """The domains of installed plugins, loaded once; a plugin that does not load is a UserError naming it."""
    found: dict[str, Domain] = {}
    for point in entry_points(group=ENTRY_POINTS):
        where = f"plugin {point.name} ({point.value}, entry point group {ENTRY_POINTS})"
        try:
            value = point.load()
            value = value() if callable(value) and not isinstance(value, Domain) else value
        except Exception as e:  # a plugin is the user's code: anything may go wrong in it
            raise UserError(f"{where} does not load: {type(e).__name__}: {str(e)[:200]}") from None
        for item in value if isinstance(value, (list, tuple)) else [value]:
            domain = read_spec(item).domain() if isinstance(item, (str, Path)) else item
            if not isinstance(domain, Domain):
                raise UserError(f"{where} gave {type(item).__name__}, not a Domain or a spec file's path")
            if domain.name in DOMAINS or domain.name in found:
                raise UserError(f"{where}: a domain named {domain.name} exists already")
            found[domain.name] = _checked(domain)
    return found


def known() -> list[str]:
    with _lock:
        return sorted({*DOMAINS, *_specs, *plugin_domains()})


def get_domain(name: str) -> Domain:
    if name in DOMAINS:
        return DOMAINS[name]
    with _lock:
        if name in _specs:
            return _specs[name][1]
    if name in plugin_domains():
        return plugin_domains()[name]
    raise UserError(f"unknown domain {name!r} (known: {', '.join(known())}; a domain of your own: --domain_spec FILE)")


def register(spec: DomainSpec, replace: bool = False) -> Domain:
    """Make the domain of `spec` known by its name. Another spec of that name is refused unless
    `replace` (a reader of several runs takes each run's own); a bundled or plugin name always is."""
    if spec.name in DOMAINS or spec.name in plugin_domains():
        raise UserError(f"domain spec {spec.source or spec.name}: a domain named {spec.name} exists already; "
                        "give the spec another name")
    same = {k: v for k, v in spec.to_dict().items() if k != "source"}
    with _lock:
        old = _specs.get(spec.name)
        if old is not None and not replace:
            if {k: v for k, v in old[0].to_dict().items() if k != "source"} != same:
                raise UserError(f"two different domains are named {spec.name} ({old[0].source} and {spec.source})")
            return old[1]
        domain = _checked(spec.domain())
        _specs[spec.name] = (spec, domain)
        return domain


def use_run_domains(run_dir: Path) -> list[str]:
    """Make known the spec domains a run kept in its folder; their names. A domain known already as
    the run kept it stays: the user's own spec file, which alone may call a scorer of the user's and
    may say where the same data lies now (every load checks its digest), or another run's record of it."""
    names = []
    for spec in run_specs(run_dir):
        with _lock:
            given = _specs.get(spec.name)
        if not (given and differs(spec, given[0]) is None):
            register(spec, replace=True)
        names.append(spec.name)
    return names


def run_domain_problems(run_dir: Path) -> list[str]:
    """`use_run_domains` for a reader that lists what it could not read rather than stopping."""
    try:
        use_run_domains(run_dir)
    except UserError as e:
        return [str(e)]
    return []


def run_domains(names: Iterable[str], run_dir: Path) -> list[Domain]:
    """The domains of a run by name, the spec domains it kept in its folder (when it has one) among them."""
    use_run_domains(run_dir)
    return [get_domain(name) for name in names]


def keep_specs(run_dir: Path, domains: list[Domain]) -> None:
    """Keep in the run's folder the spec of each of its domains that was defined by one, so that
    resuming and reading the run need neither the YAML nor its folder."""
    with _lock:
        specs = [_specs[d.name][0] for d in domains if d.name in _specs and _specs[d.name][1] is d]
    for spec in specs:
        record_spec(run_dir, spec)


def use_domain_specs(paths: list[str] | None, run_dir: str | Path | None = None) -> list[str]:
    """The names of the domains of `--domain_spec` files, each read, checked and made known. With
    `run_dir` (a resumed run, or a reader that scores one), each must define a domain of that run as
    the run kept it: the same keys, data of the same digests (wherever it lies now), a scorer file of
    the same digest."""
    specs = [read_spec(path) for path in paths or ()]
    if run_dir is not None and specs:
        folder = Path(run_dir).resolve()
        if not folder.is_dir():
            raise UserError(f"{run_dir}: no such folder")
        kept = {spec.name: spec for spec in run_specs(folder)}
        for spec in specs:
            if spec.name not in kept:
                raise UserError(f"--domain_spec {spec.source}: the run {folder} kept no domain {spec.name} "
                                f"(its spec domains: {', '.join(kept) or 'none'})")
            if (what := differs(kept[spec.name], spec)) is not None:
                raise UserError(f"--domain_spec {spec.source}: {what} differs from the domain {spec.name} "
                                f"the run {folder} was started with; pass the spec it was started with")
    named: dict[str, DomainSpec] = {}
    for spec in specs:
        if spec.name in named and differs(named[spec.name], spec) is not None:
            first = named[spec.name].source
            raise UserError(f"two different domains are named {spec.name} ({first} and {spec.source})")
        named[spec.name] = spec
    # The specs this command names are the ones that count: one an earlier call of this process made known
    # under the same name (the Python API, run again on edited or moved data) is replaced.
    return [register(spec, replace=True).name for spec in specs]


def config_domains(entries: Iterable[str], check_code: bool = True) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """loop.domains as (domain names, spec files), each once: an entry ending .yaml or .yml is a spec's path (a
    relative one is the current folder's: a config file's own are made absolute as it is read, services/config.py).
    A config may come from someone else: a spec whose scorer is code of its folder (module:function, run on this
    host) is refused in one line unless the command names it itself (--domain_spec, which then names the run's
    domains instead of the config; a group's check asks without `check_code`, and accepts in its own words)."""
    from services.config import SPEC_SUFFIXES
    from services.user_files import expand_user

    names = tuple(dict.fromkeys(e for e in entries if not e.endswith(SPEC_SUFFIXES)))
    specs = tuple(dict.fromkeys(str(expand_user(e).absolute()) for e in entries if e.endswith(SPEC_SUFFIXES)))
    for spec in specs if check_code else ():
        if (code := scorer_code(spec)) is not None:
            raise UserError(f"loop.domains names the spec {spec}, whose scorer {code} is code of its folder that would "
                            f"run on this host; to accept it, name it on the command line: --domain_spec {spec}")
    return names, specs
