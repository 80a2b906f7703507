"""The search's strategies by name: a bundled one is `STRATEGY` of search/<kind>/<name>.py, a plug-in's the
object (or class, made with no arguments) its entry point names in the group `hyperagents_imo.<kind>`.
A name no strategy has, a plug-in that does not load, or an object without the kind's methods is one line
(UserError), said before a run starts. Names are listed in services/strategy_names.py, without imports."""

from __future__ import annotations

import dataclasses
import importlib
import typing
from collections.abc import Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING

from search.best_choice import BestChoiceRule
from search.merge_partner import MergePartner
from search.meta_model_choice import MetaModelChoice
from search.novelty import NoveltyMeasure
from search.parent_selection import ParentSelection
from search.promotion import PromotionRule
from services.errors import UserError
from services.plain_data import conforms, describe, show
from services.strategy_names import GIVEN, NAME, bundled_names, group, plugin_points, strategy_names

if TYPE_CHECKING:
    from services.config import Config

# Each kind's protocol (services.strategy_names.KINDS) and what it asks of a strategy, in words.
PROTOCOLS = {"parent_selection": (ParentSelection, "needs_rows, weights(candidates, context), choose(candidates, rng, "
                                                   "context)"),
             "promotion": (PromotionRule, "reads_best, verdict(promotion, child, parent, best, floor), "
                                          "plan(above, promotion)"),
             "best_choice": (BestChoiceRule, "reads_rows, reads_heldout, choose(scored, rows, choice, heldout), "
                                             "note(choice)"),
             "novelty": (NoveltyMeasure, "prepare(lines), similarity(a, b), could_reach(a, b, threshold)"),
             "meta_model_choice": (MetaModelChoice, "choose(models, pulls, rng)"),
             "merge_partner": (MergePartner, "partner(candidates, first, parent_of, ties)")}


CONFIGURED: dict[tuple[str, str], object] = {}  # (kind, name) -> the strategy made with the run's settings


def strategy(kind: str, name: str) -> object:
    """The strategy of `kind` called `name`: as the run's `search` settings made it (`configure`), else one this
    process was given (`use`), else bundled or a plug-in's, loaded once."""
    if (kind, name) in CONFIGURED:
        found = CONFIGURED[(kind, name)]
    else:
        found = GIVEN[kind][name] if name in GIVEN[kind] else _loaded(kind, name)
    return found if name in bundled_names(kind) else Guarded(found, f"{kind.replace('_', ' ')} strategy {name}")


class Guarded:
    """A strategy that is not the project's (a plug-in's, or an object the API was given): someone's code, so an
    exception in any of its methods ends the run as one line naming it (a UserError), never a traceback; what
    the loop recorded before stays, and a resume goes on once the strategy is mended."""

    def __init__(self, inner: object, what: str) -> None:
        self._inner, self._what = inner, what

    def __getattr__(self, name: str) -> object:
        value = getattr(self._inner, name)
        if not callable(value) or isinstance(value, type):
            return value
        what = self._what

        def guarded(*args: object, **kwargs: object) -> object:
            try:
                return value(*args, **kwargs)
            except UserError:
                raise
            except Exception as e:
                raise UserError(f"the {what} raised {type(e).__name__} in {name}: {str(e)[:300]}") from None

        return guarded


def configure(search: Mapping[str, Mapping[str, object]]) -> None:
    """The strategies `search` (config.search) gives settings to, made with them for this process's run: a
    strategy with settings has `Settings` (a dataclass whose fields have defaults; it may refuse a value in
    __post_init__ with a ValueError) and `configured(settings)` (the strategy with them). A name no strategy
    has, a setting it lacks or a value it refuses is one line (UserError), said before the run starts."""
    made = configured(search)
    CONFIGURED.clear()
    CONFIGURED.update(made)


def configured(search: Mapping[str, Mapping[str, object]]) -> dict[tuple[str, str], object]:
    """The strategies `search` gives settings to, made with them, by (kind, name), without making them this
    process's (`configure` does): a reader of a handed run.json checks its settings so, as a resume would."""
    made = {}
    for name, values in search.items():
        kinds = [kind for kind in PROTOCOLS if name in strategy_names(kind)]
        if not kinds:
            known = sorted({n for kind in PROTOCOLS for n in strategy_names(kind)})
            raise UserError(f"search.{name}: no strategy is named {name} (known: {', '.join(known)})")
        for kind in kinds:
            made[(kind, name)] = with_settings(kind, name, strategy(kind, name), values)
    return made


def with_settings(kind: str, name: str, base: object, values: Mapping[str, object]) -> object:
    """`base` made with the settings `values` (see `configure`); `base` itself when it takes none and none are
    given."""
    kind_name, settings_type, make = kind.replace("_", " "), getattr(base, "Settings", None), \
        getattr(base, "configured", None)
    if not (dataclasses.is_dataclass(settings_type) and isinstance(settings_type, type) and callable(make)):
        if values:
            raise UserError(f"search.{name}: the {kind_name} strategy {name} takes no settings")
        return base
    known = {f.name: f for f in dataclasses.fields(settings_type)}
    for key, value in values.items():
        if key not in known:
            raise UserError(f"search.{name}.{key}: {name} has no such setting (it has {', '.join(known)})")
        expected = typing.get_type_hints(settings_type).get(key, object)
        if not conforms(value, expected):
            raise UserError(f"search.{name}.{key} must be {describe(expected)}, got {show(value)}")
    try:
        return make(settings_type(**values))
    except UserError:
        raise
    except ValueError as e:  # the strategy's own check of a value
        raise UserError(f"search.{name}: {str(e)[:300]}") from None
    except Exception as e:  # a plug-in's code: anything may go wrong in it
        raise UserError(f"search.{name}: the {kind_name} strategy {name} did not take its settings: "
                        f"{type(e).__name__}: {str(e)[:200]}") from None


def use(kind: str, value: object) -> str:
    """The name a run's config gives `value`, a strategy of `kind` as an object (the Python API takes one, as
    GEPA takes its selector): its `name` attribute, else its class's name in lower case. The object stays in
    this process only: the run's record names it, and a resume must be given it again."""
    protocol, attributes = PROTOCOLS[kind]
    name = getattr(value, "name", None)
    name = name if isinstance(name, str) else type(value).__name__.lower()
    what = f"the {kind.replace('_', ' ')} strategy {type(value).__name__}"
    if not isinstance(value, protocol):
        raise UserError(f"{what} lacks what a {kind.replace('_', ' ')} strategy has ({attributes})")
    if not NAME.fullmatch(name):
        raise UserError(f"{what} is named {name[:80]!r}: a name is letters, digits and _, at most 64")
    if name in bundled_names(kind) or any(p.name == name for p in plugin_points(kind)):
        raise UserError(f"{what}: the name {name!r} is another strategy's; give it a `name` attribute of its own")
    GIVEN[kind][name] = value  # one given again (a notebook's cell run again) takes the name over
    return name


@cache
def _loaded(kind: str, name: str) -> object:
    protocol, attributes = PROTOCOLS[kind]
    if name in bundled_names(kind):
        return importlib.import_module(f"search.{kind}.{name}").STRATEGY
    points = [p for p in plugin_points(kind) if p.name == name]
    if not points:
        raise UserError(f"{kind.replace('_', ' ')} {name!r} is no strategy of this project or of an installed "
                        f"plug-in (known: {', '.join(strategy_names(kind))})")
    where = f"plug-in {name} ({points[0].value}, entry point group {group(kind)})"
    try:
        value = points[0].load()
        value = value() if isinstance(value, type) else value
        conforms = isinstance(value, protocol)  # reads its attributes: a property of its own may raise
    except (Exception, SystemExit) as e:  # a plug-in is someone's code: anything may go wrong in it
        raise UserError(f"{where} does not load: {type(e).__name__}: {str(e)[:200]}") from None
    if not conforms:
        raise UserError(f"{where} gave {type(value).__name__}, which lacks what a {kind.replace('_', ' ')} "
                        f"strategy has ({attributes})")
    return value


def parent_selection(name_or_strategy: str | ParentSelection) -> ParentSelection:
    """A parent selection strategy: by name, or an instance as it is."""
    if isinstance(name_or_strategy, str):
        return strategy("parent_selection", name_or_strategy)  # type: ignore[return-value]
    return name_or_strategy


def promotion_rule(name: str) -> PromotionRule:
    """The promotion rule called `name` (loop.promotion, or a stage's own)."""
    return strategy("promotion", name)  # type: ignore[return-value]


def best_choice_rule(name: str) -> BestChoiceRule:
    """The best choice rule called `name` (loop.best_choice)."""
    return strategy("best_choice", name)  # type: ignore[return-value]


def novelty_measure(name: str) -> NoveltyMeasure:
    """The novelty measure called `name` (loop.novelty_measure)."""
    return strategy("novelty", name)  # type: ignore[return-value]


def meta_model_choice(name: str) -> MetaModelChoice:
    """The meta model choice called `name` (loop.meta_bandit)."""
    return strategy("meta_model_choice", name)  # type: ignore[return-value]


def merge_partner_rule(name: str) -> MergePartner:
    """The merge partner strategy called `name` (loop.merge_partner)."""
    return strategy("merge_partner", name)  # type: ignore[return-value]


def load_named(config: Config, stage_rules: Iterable[str] = ()) -> None:
    """Every strategy the config names (and the promotion rules of the run's stages), loaded and made with the
    config's `search` settings: a plug-in that does not load, or a setting a strategy refuses, is one line
    (UserError) before the run starts."""
    configure(config.search)
    loop = config.loop
    parent_selection(loop.parent_selection)
    best_choice_rule(loop.best_choice)
    novelty_measure(loop.novelty_measure)
    meta_model_choice(loop.meta_bandit)
    merge_partner_rule(loop.merge_partner)
    for rule in sorted({loop.promotion, *stage_rules}):
        promotion_rule(rule)
