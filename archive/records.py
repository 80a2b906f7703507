"""The records a run keeps about its nodes, typed, versioned and checked on the way in.

A record is trusted only in the shape the core writes: known keys, typed fields, a known
status. Every record carries `schema_version`; one of an older shape is migrated when read
(records written before versions existed are version 0), one of a newer shape is refused.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from search.stats import interval_text
from services.fsutil import read_bounded
from services.plain_data import conforms, describe, show
from services.render import BIDI_PATTERN
from services.user_files import parse_json

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

    class _Record(DataclassInstance, typing.Protocol):
        """A record class: a dataclass with the schema version it writes."""

        SCHEMA: typing.ClassVar[int]

NODE_SCHEMA = 5  # node.json; 2 adds intervals, screening; 3 meta_error; 4 status duplicate, flags, meta_model, parents;
# 5 raced_out
META_SCHEMA = 1  # the meta agent's result, in archive.jsonl's meta_done event
START_SCHEMA = 2  # a generation's start, archive.jsonl's gen_start event; 2 adds meta_model and other_parent
RUN_SCHEMA = 3  # run.json; 2 adds initial_from, 3 name and tags
RUN_JSON = "run.json"  # a run folder's record of how it was started
MAX_RUN_JSON = 2**20  # bytes of run.json read at most
MAX_NAME = 120  # characters of a run's name: a title in a list of runs, not a description
MAX_TAG = 40  # characters of one tag
MAX_TAGS = 20  # tags of one run
MAX_AMOUNT = 1e12  # dollars, tokens or seconds a node records per role or phase: far above any real run
MAX_VERDICT = 1000  # characters of a node's raced_out verdict (the loop writes about 150)

COMMIT = re.compile(r"[0-9a-f]{40}")  # a commit of the run's repository (git's SHA-1 object names)
EVAL_KEY = re.compile(r"[0-9a-f]{24}")  # a folder under evals/: archive/eval_store.py EvalStore.key
NODE_ID = re.compile(r"initial|[0-9]+")  # the initial node, or a generation's number


class Status(StrEnum):
    """How a node ended; only OK nodes can be parents."""

    OK = "ok"
    NO_CHANGE = "no_change"  # the meta agent changed nothing that counts
    META_FAILED = "meta_failed"  # the meta agent's run failed (its change is kept to read)
    LOAD_FAILED = "load_failed"  # the task agent or another entry point does not import
    EVAL_FAILED = "eval_failed"  # the evaluation failed for another reason
    BUDGET_STOPPED = "budget_stopped"  # the money ran out during its evaluation; reopened on resume
    LOST = "lost"  # the machine of its sandbox was lost on every try (a Ray worker node); reopened on resume
    DUPLICATE = "duplicate"  # its change is a near-duplicate of another node's (loop.novelty_threshold): not evaluated


@functools.cache
def _hints(cls: type[_Record]) -> dict:
    """The field types of record class `cls` (typing evaluates them from text: done once per class)."""
    return {k: v for k, v in typing.get_type_hints(cls).items() if k != "SCHEMA"}


def _checked(cls: type[_Record], data: object, extra: dict) -> dict:
    """`data` as the fields of dataclass `cls`, after its schema version; ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    data = dict(data)
    version = data.pop("schema_version", 0)
    if type(version) is not int or version < 0:
        raise ValueError(f"schema_version must be an integer 0 or more, got {show(version)}")
    if version > cls.SCHEMA:
        raise ValueError(f"schema_version {version} is newer than this version of the project reads ({cls.SCHEMA})")
    hints = _hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ValueError(f"unknown keys {', '.join(map(str, unknown))}")
    missing = [f.name for f in fields(cls)
               if f.name not in data and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ValueError(f"missing keys {', '.join(missing)}")
    for key, value in data.items():
        hint = extra.get(key, hints[key])
        if not conforms(value, hint):
            raise ValueError(f"{key} must be {describe(hint)}, got {show(value)}")
    if "status" in data:
        if data["status"] not in set(Status):
            raise ValueError(f"status must be one of {', '.join(Status)}, got {show(data['status'])}")
        data["status"] = Status(data["status"])
    commit = data.get("commit")
    if commit is not None and not COMMIT.fullmatch(commit):
        raise ValueError(f"commit must be 40 hex digits or null, got {show(commit)}")
    return data


@dataclass(frozen=True)
class GenStart:
    """A generation started: which node it makes, from which parent (None: the initial node)."""

    SCHEMA: typing.ClassVar[int] = START_SCHEMA
    node_id: str
    parent: str | None
    generation: int
    meta_model: str | None = None  # the model its meta agent runs on (None: models.meta, as before version 2)
    other_parent: str | None = None  # a merge's second parent (loop.merge_every)

    def to_dict(self) -> dict:
        return {"schema_version": self.SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object) -> GenStart:
        data = _checked(cls, data, {})
        if not NODE_ID.fullmatch(data["node_id"]) or data["generation"] < 0:
            raise ValueError(f"not a generation the run starts: {show(data)}")
        return cls(**data)


@dataclass
class MetaResult:
    """What the meta agent's run left: its change committed (or None) and how the run ended."""

    SCHEMA: typing.ClassVar[int] = META_SCHEMA
    status: Status  # OK, META_FAILED, or BUDGET_STOPPED (never logged: the run is redone on resume)
    commit: str | None  # the captured change, None when it changed nothing that counts
    patch: dict  # files, insertions, deletions, dropped, dropped_why
    seconds: float
    error: str | None = None  # why it failed; with OK, why it changed nothing (loop.meta_failure parent)

    def to_dict(self) -> dict:
        return {"schema_version": self.SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object) -> MetaResult:
        return cls(**_checked(cls, data, {"status": str}))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class DomainEval:
    """One domain's evaluation on one split, as a node records it. node.json keeps its parts in four
    maps keyed the same way (scores, samples, eval_keys, intervals, as the format has since version 1);
    `Node.evaluation` reads them as one value and `Node.set_evaluation` writes them together."""

    score: float | None  # the domain's score key; None: evaluated, but nothing could be scored
    rows: int | None = None  # rows scored (None when the record does not say)
    key: str | None = None  # the evaluation's folder under evals/ (EvalStore.key)
    interval: tuple[float, float] | None = None  # 95%: Wilson for right/wrong rows, bootstrap for partial credit

    def to_dict(self) -> dict:
        """Its form in final_test.json and evaluations.json."""
        return {"score": self.score, "rows": self.rows, "interval": list(self.interval) if self.interval else None,
                "key": self.key}

    @classmethod
    def from_dict(cls, data: object) -> DomainEval:
        """The form `to_dict` writes, with its rows counted and its key an address under evals/; else ValueError."""
        if not isinstance(data, dict) or set(data) - {"score", "rows", "interval", "key"}:
            raise ValueError(f"expected {{score, rows, interval, key}}, got {show(data)}")
        score, rows, band, key = (data.get(k) for k in ("score", "rows", "interval", "key"))
        if not (score is None or _is_number(score)) or type(rows) is not int or rows < 0:
            raise ValueError(f"score must be a number or null and rows a count, got {show(score)}, {show(rows)}")
        if band is not None and not (isinstance(band, list) and len(band) == 2 and all(map(_is_number, band))):
            raise ValueError(f"interval must be [low, high] or null, got {show(band)}")
        if key is not None and not (isinstance(key, str) and EVAL_KEY.fullmatch(key)):
            raise ValueError(f"key must be an address under evals/ (24 hex digits) or null, got {show(key)}")
        return cls(score, rows, key, (band[0], band[1]) if band else None)

    def text(self) -> str:
        """`0.620 [0.522, 0.710] n=100`: the score with its interval and rows, for a person."""
        if self.score is None:
            return "none"
        band = f" {interval_text(*self.interval)}" if self.interval else ""
        return f"{self.score:.3f}{band}" + (f" n={self.rows}" if self.rows else "")


@dataclass
class Node:
    SCHEMA: typing.ClassVar[int] = NODE_SCHEMA
    node_id: str
    parent: str | None
    generation: int
    commit: str | None = None
    status: Status = Status.OK
    scores: dict[str, dict[str, float | None]] = field(default_factory=dict)  # domain -> split -> score (score key)
    samples: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> split -> rows scored
    full_eval: dict[str, bool] = field(default_factory=dict)  # domain -> whether the full evaluation ran
    eval_keys: dict[str, dict[str, str]] = field(default_factory=dict)  # domain -> split -> address under evals/
    intervals: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # domain -> split -> [low, high] (95%)
    screening: dict[str, list[str]] = field(default_factory=dict)  # domain -> each stage's verdict, as a line
    # loop.racing's verdict when the full evaluation stopped early (search/racing.py): the node keeps the rows it
    # has, is a parent on them and is never the run's best; None: not raced out
    raced_out: str | None = None
    cost_usd: dict[str, float] = field(default_factory=dict)  # role -> dollars spent for this node
    tokens: dict[str, int] = field(default_factory=dict)  # role -> tokens
    seconds: dict[str, float] = field(default_factory=dict)  # phase (meta, check, eval, total) -> wall seconds
    patch: dict = field(default_factory=dict)  # files, insertions, deletions, dropped (protected paths)
    error: str | None = None
    # Written by earlier versions under loop.meta_failure parent (its meta agent failed, its change was
    # evaluated anyway); no longer written, it still bars the node's parent.
    meta_error: str | None = None
    flags: list[str] = field(default_factory=list)  # why it is suspicious (archive/tamper.py): shown, never acted on
    meta_model: str | None = None  # the model its meta agent ran on (None: the initial node, or a run before version 4)
    parents: list[str] = field(default_factory=list)  # a merge's two parents, `parent` first; empty for any other node
    created_at: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))

    def to_dict(self) -> dict:
        return {"schema_version": self.SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object, folder: str) -> Node:
        """The record of `nodes/<folder>/node.json`, trusted only in the shape the core writes (known keys,
        typed fields, the folder's own id, a known status); else ValueError naming what is wrong."""
        data = _checked(cls, data, {"status": str})
        if data["node_id"] != folder:
            raise ValueError(f"node_id {data['node_id']!r} is not its folder's name {folder!r}")
        if data["generation"] < 0:
            raise ValueError(f"generation must be 0 or more, got {data['generation']}")
        for name in ("cost_usd", "tokens", "seconds"):  # shown and summed: a handed record may hold NaN or -1e300
            for what, amount in data.get(name, {}).items():
                if not 0 <= amount <= MAX_AMOUNT:  # NaN compares false; a huge int compares without a float
                    raise ValueError(f"{name} of {show(what)} must be a number from 0 to {MAX_AMOUNT:g}, "
                                     f"got {show(amount)}")
        raced = data.get("raced_out")  # the loop's own words and numbers (search/racing.py), shown as they are
        if raced is not None and (len(raced) > MAX_VERDICT or not raced.isprintable()):
            raise ValueError(f"raced_out must be one line of printable text of at most {MAX_VERDICT} characters, "
                             f"got {show(raced[:60])}{'...' if len(raced) > 60 else ''}")
        for domain, keys in data.get("eval_keys", {}).items():
            for split, key in keys.items():
                if not EVAL_KEY.fullmatch(key):
                    raise ValueError(f"eval_keys of {show(domain)} {show(split)} must be a key of evals/ "
                                     f"(24 hex digits), got {show(key)}")
        return cls(**data)

    def evaluation(self, domain: str, split: str) -> DomainEval | None:
        """The node's evaluation of `domain` on `split`, None where it has none."""
        splits = self.scores.get(domain, {})
        if split not in splits:
            return None
        band = self.intervals.get(domain, {}).get(split)
        return DomainEval(splits[split], self.samples.get(domain, {}).get(split),
                          self.eval_keys.get(domain, {}).get(split), (band[0], band[1]) if band else None)

    def eval_key(self, domain: str, split: str) -> str | None:
        """Where the node's evaluation of `domain` on `split` is kept under evals/, None where it has none."""
        return self.eval_keys.get(domain, {}).get(split)

    def evaluations(self) -> Iterator[tuple[str, str, DomainEval]]:
        """Every (domain, split, evaluation) the node has, in the order they were recorded."""
        for domain, splits in self.scores.items():
            for split in splits:
                found = self.evaluation(domain, split)
                if found is not None:
                    yield domain, split, found

    def set_evaluations(self, domain: str, found: Mapping[str, DomainEval]) -> None:
        """Record `found` (split -> evaluation) as the node's evaluations of `domain`, replacing any before."""
        self.scores[domain] = {split: e.score for split, e in found.items()}
        self.samples[domain] = {split: e.rows for split, e in found.items() if e.rows is not None}
        self.eval_keys[domain] = {split: e.key for split, e in found.items() if e.key is not None}
        self.intervals[domain] = {split: list(e.interval) for split, e in found.items() if e.interval is not None}

    def scores_text(self) -> str:
        """The scores with their 95% interval and rows, for a person: `imo_grading/val=0.620 [0.522, 0.710] n=100`."""
        shown = [f"{d}/{s}={found.text()}" for d, s, found in self.evaluations() if found.score is not None]
        raced = f" ({self.raced_out.split(':', 1)[0]})" if self.raced_out else ""  # "raced out after 40 of 100 rows"
        return (", ".join(shown) or "not scored") + raced

    @property
    def meta_failed(self) -> bool:
        """Whether the meta agent that made this node failed (whatever happened to its change)."""
        return self.status == Status.META_FAILED or self.meta_error is not None

    @property
    def valid_parent(self) -> bool:
        """Only a node that loaded and was scored can be built on (a no-op child is its parent again)."""
        return self.status == Status.OK

    @property
    def can_be_best(self) -> bool:
        """A valid parent that was not raced out: a raced-out node has fewer rows than a node measured in full,
        and its race found it below the best's score (search/racing.py)."""
        return self.valid_parent and self.raced_out is None


@dataclass
class RunRecord:
    """run.json: what a run was started with, reused as it is when the run resumes."""

    SCHEMA: typing.ClassVar[int] = RUN_SCHEMA
    domains: list[str]  # domain names, in the order given
    config: dict  # Config.to_dict() of the run's configuration, flags applied
    sandbox: str = ""  # the backend the run chose
    initial_from: dict | None = None  # the node the run started from (--initial_from): run, node, commit, keep
    name: str = ""  # what the user calls the run (--name), shown in lists of runs; "" = unnamed
    tags: list[str] = field(default_factory=list)  # labels to find and group runs by (--tag), in the order given
    updated_at: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))

    def to_dict(self) -> dict:
        return {"schema_version": self.SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object) -> RunRecord:
        record = cls(**_checked(cls, data, {"tags": list[str]}))
        if not record.domains:
            raise ValueError("domains must name at least one domain")
        check_labels(record.name, record.tags)
        return record

    @classmethod
    def read(cls, run_dir: Path) -> RunRecord:
        """The run.json of `run_dir`, read within MAX_RUN_JSON bytes and checked: the one reader of
        the file. FileNotFoundError when there is none; OSError or ValueError (a one-line reason)
        when it cannot be read or is not a run record."""
        try:
            data = parse_json(read_bounded(Path(run_dir) / RUN_JSON, MAX_RUN_JSON))
        except ValueError as e:
            raise ValueError(f"not valid JSON: {e}") from None
        return cls.from_dict(data)


def label_problem(text: str, limit: int) -> str | None:
    """Why `text` cannot be a run's name or tag, or None: it is shown on terminals and pages as it
    is, so it is one line of printable characters (no control, no bidi mark), within `limit`."""
    if len(text) > limit:
        return f"longer than {limit} characters"
    if text != text.strip():
        return "starts or ends with a space"
    if not text.isprintable() or BIDI_PATTERN.search(text):
        return "holds a control or bidi character"
    return None


def check_labels(name: str, tags: list[str]) -> None:
    """A run's name and tags as run.json may hold them; ValueError naming the first bad one."""
    if problem := label_problem(name, MAX_NAME):
        raise ValueError(f"name {show(name)}: {problem}")
    if len(tags) > MAX_TAGS:
        raise ValueError(f"tag: at most {MAX_TAGS} tags, got {len(tags)}")
    for tag in tags:
        if problem := label_problem(tag, MAX_TAG) or (None if tag else "empty"):
            raise ValueError(f"tag {show(tag)}: {problem}")
    if len(set(tags)) != len(tags):
        raise ValueError("a tag is given twice")
