"""The held-out grader's record: the proofs of the run's best nodes graded again by a second grader
that the run never optimizes against, so a task agent that learns its grader rather than the task
shows as a gap between the two grades (HyperAgents reports 0.662 by the grader it optimized against
and 0.543 by another on one long run).

- `heldout/<key>/`: one grading per (proofs, grading domain, grader agent, model), addressed by their
  hash as evals/ is: the predictions.csv graded (a copy of the evaluation's), the grading run in
  `gradings/`, and `report.json` once scored. The same proofs graded by the same model are paid for
  once, and a grading a kill cut short resumes from its journal.
- `heldout.json`: per node graded, both grades of the same rows and their gap; per generation, the
  run's best node among the nodes of generations up to it, with its two grades. Written whole and
  atomically by the loop (optimizer/heldout.py), read back checked: a file that is not one is a
  one-line UserError.

The best-node rule `heldout` (search/best_choice/heldout.py) reads `HeldOutRecord.node_grade`; the report, the
dashboard and the plots read the record as it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from archive.eval_store import EvalStore
from archive.records import EVAL_KEY, NODE_ID
from search.stats import bootstrap_mean
from services.errors import UserError
from services.fsutil import atomic_write_json, read_bounded
from services.plain_data import conforms, describe, show
from services.user_files import parse_json

HELDOUT = "heldout.json"
HELDOUT_SCHEMA = 1
HELDOUT_DIR = "heldout"
ROLE = "heldout_grader"  # the ledger role its calls are booked to
MAX_HELDOUT = 2**22  # a few hundred bytes a node and a generation


class HeldOutStore(EvalStore):
    """`heldout/<key>/`, laid out as an evaluation's folder (EvalStore): predictions.csv, gradings/, report.json."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.root = Path(run_dir) / HELDOUT_DIR

    @staticmethod
    def address(proofs: bytes, grading: str, grader_agent: str, model: str) -> str:
        """The key of grading `proofs` (a predictions.csv's bytes) by `grader_agent` of domain `grading` on
        `model`."""
        text = json.dumps([hashlib.sha256(proofs).hexdigest(), grading, grader_agent, model])
        return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Grade:
    """One node's proofs of one domain, as the run's grader and the held-out grader scored them."""

    node_id: str
    generation: int
    domain: str
    grader: str  # the model the run optimizes against
    model: str  # the held-out grader's model
    split: str = ""  # the split whose proofs its selection score is made of (and were graded again)
    rows: int = 0
    eval_key: str | None = None  # the evaluation whose proofs were graded, under evals/
    optimized: float | None = None  # the run's grader's score of the rows (the evaluation's report)
    heldout: float | None = None  # the held-out grader's score of the same rows; None when it has none
    key: str | None = None  # the grading's folder under heldout/
    gap_interval: list[float] | None = None  # 95% bootstrap interval of optimized - held-out over the rows
    cost_usd: float = 0.0  # what the held-out grading cost when it ran (0 when it was found done)
    error: str | None = None  # why there is no held-out score

    @property
    def gap(self) -> float | None:
        return None if self.optimized is None or self.heldout is None else self.optimized - self.heldout


@dataclass(frozen=True)
class GenerationGap:
    """The run's best node among the nodes of generations up to `generation`, with both its grades."""

    generation: int
    best: str
    optimized: float | None
    heldout: float | None

    @property
    def gap(self) -> float | None:
        return None if self.optimized is None or self.heldout is None else self.optimized - self.heldout


@dataclass
class HeldOutRecord:
    model: str  # the held-out grader the run grades with now; grades of another model are kept, not read
    domains: list[str]  # the run's domains scored by a grader model, each of which a node's grade averages
    grades: list[Grade] = field(default_factory=list)
    generations: list[GenerationGap] = field(default_factory=list)

    def grade(self, node_id: str, domain: str) -> Grade | None:
        """The node's grade of `domain` by the current model, or None when it was never graded."""
        return next((g for g in self.grades if (g.node_id, g.domain, g.model) == (node_id, domain, self.model)), None)

    def graded(self, node_id: str) -> bool:
        """Whether every domain of the node was graded by the current model (or tried and failed)."""
        return all(self.grade(node_id, d) is not None for d in self.domains)

    def node_grade(self, node_id: str) -> float | None:
        """The held-out grade of the node, averaged over the graded domains; None when one is missing."""
        return self._mean(node_id, "heldout")

    def optimized_grade(self, node_id: str) -> float | None:
        """The run's grader's grade of the same rows, averaged the same way."""
        return self._mean(node_id, "optimized")

    def _mean(self, node_id: str, which: str) -> float | None:
        values = [getattr(g, which) if (g := self.grade(node_id, d)) else None for d in self.domains]
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known and len(known) == len(values) else None

    def add(self, grade: Grade) -> None:
        self.grades = [g for g in self.grades
                       if (g.node_id, g.domain, g.model) != (grade.node_id, grade.domain, grade.model)] + [grade]

    def note(self, entry: GenerationGap) -> None:
        kept = [g for g in self.generations if g.generation != entry.generation]
        self.generations = sorted(kept + [entry], key=lambda g: g.generation)

    def to_dict(self) -> dict:
        return {"schema_version": HELDOUT_SCHEMA, "model": self.model, "domains": self.domains,
                "grades": [{**asdict(g), "gap": g.gap} for g in self.grades],
                "generations": [{**asdict(g), "gap": g.gap} for g in self.generations]}


def gap_interval(optimized: dict[str, float], heldout: dict[str, float]) -> list[float] | None:
    """95% percentile-bootstrap interval of the mean gap over the rows both grades have (paired: each
    row's difference, so the rows' own difficulty cancels out); None without shared rows."""
    shared = sorted(set(optimized) & set(heldout))
    if not shared:
        return None
    low, high = bootstrap_mean([optimized[q] - heldout[q] for q in shared])
    return [round(low, 4), round(high, 4)]


_Entry = typing.TypeVar("_Entry", Grade, GenerationGap)


def _entry(cls: type[_Entry], data: object) -> _Entry:
    """One entry of the record as `cls`; its `gap` must be what its grades make. ValueError otherwise."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {show(data)}")
    data = dict(data)
    gap = data.pop("gap", None)
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(hints))
    missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING]
    if unknown or missing:
        raise ValueError(f"unknown keys {', '.join(map(str, unknown))}" if unknown else
                         f"missing keys {', '.join(missing)}")
    for key, value in data.items():
        if not conforms(value, hints[key]):
            raise ValueError(f"{key} must be {describe(hints[key])}, got {show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key} must be a finite number, got {show(value)}")
    entry = cls(**data)
    if gap != entry.gap and not (gap is not None and entry.gap is not None and abs(gap - entry.gap) <= 1e-9):
        raise ValueError(f"gap {show(gap)} is not the difference of its grades")
    return entry


def _checked_grade(data: object) -> Grade:
    grade = _entry(Grade, data)
    if not NODE_ID.fullmatch(grade.node_id) or grade.generation < 0 or grade.rows < 0:
        raise ValueError(f"not a node's grade: {show(data)}")
    if any(k is not None and not EVAL_KEY.fullmatch(k) for k in (grade.eval_key, grade.key)):
        raise ValueError(f"eval_key and key must be 24 hex digits, got {show(grade.eval_key)}, {show(grade.key)}")
    if grade.gap_interval is not None and len(grade.gap_interval) != 2:
        raise ValueError(f"gap_interval must be [low, high], got {show(grade.gap_interval)}")
    return grade


def _checked_generation(data: object) -> GenerationGap:
    entry = _entry(GenerationGap, data)
    if not NODE_ID.fullmatch(entry.best) or entry.generation < 0:
        raise ValueError(f"not a generation's best node: {show(data)}")
    return entry


def from_dict(data: object) -> HeldOutRecord:
    """The record in the shape `HeldOutRecord.to_dict` writes; ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    version = data.get("schema_version")
    if version != HELDOUT_SCHEMA:
        raise ValueError(f"schema_version {HELDOUT_SCHEMA} expected, got {show(version)}")
    if set(data) != {"schema_version", "model", "domains", "grades", "generations"}:
        raise ValueError("expected the keys schema_version, model, domains, grades and generations")
    model, domains, grades, generations = data["model"], data["domains"], data["grades"], data["generations"]
    if not isinstance(model, str) or not conforms(domains, list[str]) or not domains:
        raise ValueError("model must be text and domains a list of names")
    if not isinstance(grades, list) or not isinstance(generations, list):
        raise ValueError("grades and generations must be lists")
    return HeldOutRecord(model, domains, [_checked_grade(g) for g in grades],
                         [_checked_generation(g) for g in generations])


def read_heldout(run_dir: Path) -> HeldOutRecord | None:
    """heldout.json of `run_dir` as the loop wrote it, None when the run has none; a UserError naming
    the file when it is not one (garbled, a link, too big, a wrong shape)."""
    path = Path(run_dir) / HELDOUT
    try:
        return from_dict(parse_json(read_bounded(path, MAX_HELDOUT)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # ValueError: also bad JSON and bad UTF-8
        raise UserError(f"{path}: not a held-out grader's record the run wrote ({str(e)[:300]})") from None


def write_heldout(run_dir: Path, record: HeldOutRecord) -> None:
    atomic_write_json(Path(run_dir) / HELDOUT, record.to_dict())
