"""Best choice: which node is a run's best (the report, --final_test, transfer, sica's peer).

A rule is an object with `choose` (the best of the scored (score, node) pairs, given a node's per-row scores
on the selection split and its held-out grade, each asked only when the rule reads it), `reads_rows` and
`reads_heldout` (whether it reads those, which costs a read of every full evaluation, or of heldout.json)
and `note` (how the best was chosen, in words, for the run's summary; "" says nothing); `Chain` is the base
of a rule that walks the nodes in generation order, a higher one taking the best's place when `takes` agrees.
A bundled rule is a file of this folder whose `STRATEGY` is an instance; a plug-in names its class or instance
under the entry point group `hyperagents_imo.best_choice` (docs/search.md). `loop.best_choice`
chooses one; `BestChoice` holds it with its settings, and archive.promotion.choose_best applies it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from search.parent_selection import TIE_TOLERANCE
from search.promotion import RowScores
from services.choices import Ties
from services.strategy_names import strategy_names

if TYPE_CHECKING:
    from services.config import LoopConfig


@dataclass(frozen=True)
class BestChoice:
    """How a run names its best node: the rule (`loop.best_choice`, a file of this folder or a plug-in's)
    with its own settings (`search.<rule>`; the rule's defaults when empty), ties and tolerance. Every rule
    takes a score as higher only when it is more than `tolerance` higher."""

    rule: str = "highest"
    ties: str = "latest"
    tolerance: float = TIE_TOLERANCE  # loop.tie_tolerance: scores within it are equal
    settings: tuple[tuple[str, object], ...] = ()  # the rule's search.<rule> settings, (name, value) pairs

    @classmethod
    def of(cls, loop: LoopConfig | dict, search: object = None) -> BestChoice:
        """From a loop config (services.config.LoopConfig) or its dict in run.json, and the config's `search`
        section (its settings for the rule), checked: ValueError in one line."""
        get = loop.get if isinstance(loop, dict) else lambda name, default: getattr(loop, name, default)
        rule = get("best_choice", "highest")
        own = search.get(rule) if isinstance(search, dict) and isinstance(rule, str) else None
        settings = tuple(sorted(own.items())) if isinstance(own, dict) else ()
        choice = cls(rule, get("ties", "latest"), get("tie_tolerance", TIE_TOLERANCE), settings)
        rules = strategy_names("best_choice")
        if choice.rule not in rules or choice.ties not in tuple(Ties) \
                or not (type(choice.tolerance) in (int, float) and 0.0 <= choice.tolerance < 1.0):
            raise ValueError(f"best choice must be one of {', '.join(rules)} with ties latest or earliest and a "
                             f"tie tolerance from 0 to below 1, got {choice}")
        if not (own is None or isinstance(own, dict)):
            raise ValueError(f"search.{rule} must be a mapping of its settings, got {type(own).__name__}")
        return choice  # its settings are the rule's to check: archive.promotion.best_rule makes it with them


class Ranked(Protocol):
    """What a rule reads of a node besides its scores (archive.records.Node has both)."""

    @property
    def node_id(self) -> str: ...

    @property
    def generation(self) -> int: ...


Node = TypeVar("Node", bound=Ranked)
Rows = Callable[[Node], RowScores]  # a node's per-row scores on the selection split
GradeOf = Callable[[Node], float | None]  # a node's held-out grade (None: none)


@runtime_checkable
class BestChoiceRule(Protocol):
    reads_rows: bool
    reads_heldout: bool

    def choose(self, scored: list[tuple[float, Node]], rows: Rows[Node], choice: BestChoice,
               heldout: GradeOf[Node]) -> Node: ...

    def note(self, choice: BestChoice) -> str: ...


class Chain:
    """A rule that walks the scored nodes in generation order (node id within a generation): a node that scores
    more than `tolerance` above the best so far takes its place when `takes` agrees (each a (score, node) pair)."""

    reads_rows = False
    reads_heldout = False

    def takes(self, choice: BestChoice, node: tuple[float, Node], best: tuple[float, Node], rows: Rows[Node],
              heldout: GradeOf[Node]) -> bool:
        raise NotImplementedError

    def choose(self, scored: list[tuple[float, Node]], rows: Rows[Node], choice: BestChoice,
               heldout: GradeOf[Node]) -> Node:
        ordered = sorted(scored, key=lambda t: (t[1].generation, t[1].node_id))
        best = ordered[0]
        for node in ordered[1:]:
            if node[0] > best[0] + choice.tolerance and self.takes(choice, node, best, rows, heldout):
                best = node
        return best[1]
