"""The search's strategies by name: a bundled one is `STRATEGY` of search/<kind>/<name>.py, a plug-in's the
object (or class, made with no arguments) its entry point names in the group `hyperagents_imo.<kind>`.
A name no strategy has, a plug-in that does not load, or an object without the kind's methods is one line
(UserError), said before a run starts. Names are listed in services/strategy_names.py, without imports."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

from search.best_choice import BestChoiceRule
from search.novelty import NoveltyMeasure
from search.parent_selection import ParentSelection
from search.promotion import PromotionRule
from services.errors import UserError
from services.strategy_names import bundled_names, group, plugin_points, strategy_names

if TYPE_CHECKING:
    from services.config import LoopConfig

# Each kind's protocol (services.strategy_names.KINDS) and what it asks of a strategy, in words.
PROTOCOLS = {"parent_selection": (ParentSelection, "needs_rows, weights(candidates, context), choose(candidates, rng, "
                                                   "context)"),
             "promotion": (PromotionRule, "reads_best, verdict(promotion, child, parent, best, floor), "
                                          "plan(above, promotion)"),
             "best_choice": (BestChoiceRule, "reads_rows, reads_heldout, choose(scored, rows, choice, heldout), "
                                             "note(choice)"),
             "novelty": (NoveltyMeasure, "prepare(lines), similarity(a, b), could_reach(a, b, threshold)")}


@cache
def strategy(kind: str, name: str) -> object:
    """The strategy of `kind` called `name`, loaded once."""
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


def load_named(loop: LoopConfig, stage_rules: Iterable[str] = ()) -> None:
    """Every strategy `loop` names (and the promotion rules of the run's stages), loaded: a plug-in that does not
    load is one line (UserError) before the run starts."""
    parent_selection(loop.parent_selection)
    best_choice_rule(loop.best_choice)
    novelty_measure(loop.novelty_measure)
    for rule in sorted({loop.promotion, *stage_rules}):
        promotion_rule(rule)
