"""A domain written as a file: a YAML spec names the data per split, the columns and the scorer,
and becomes a `Domain` like the bundled ones, without editing the package.

    name: capitals
    data: {train: capitals_train.csv, val: capitals_val.csv}   # paths relative to the spec
    id: qid
    inputs: {question: Question}       # key the agent sees -> column
    label: Answer
    hidden: [Answer, Notes]            # never sent to an agent
    scorer: exact                      # exact | math_verify | llm_judge | module:function
    score_key: accuracy

The spec is read as bounded data (services/user_files.py) and checked against its data before a
run starts: every problem is one line naming the key. Row ids are shown where agents never are
(the harness sends rows to a sandbox under tokens of its own), yet an id is none of the columns an
agent must not see and equals none of their values on its row, so that no copy of it can tell one.
A run keeps what it needs in its folder (`domain_specs/<name>.json`: the spec, each data file's
absolute path and sha256, the sha256 of a user scorer's file), so resuming it, analyzing it or
showing it on the dashboard needs neither the YAML nor its folder; a resumed run refuses data that
changed since. A record is a stranger's input (a run folder may come from anyone): it never names
code to run. A user's scorer function is called only when the user names the spec file again
(`--domain_spec`), and that spec must be the one the record kept (`differs`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from domains.base import Domain
from domains.data import TABLE_FORMATS, load_table, sha256_file
from domains.spec_scoring import BUILT_IN, SpecScorer, file_sha256, scorer_file, user_function
from services.errors import UserError
from services.fsutil import atomic_write_json, read_bounded
from services.user_files import parse_json, read_yaml

if TYPE_CHECKING:
    import pandas as pd

SPEC_SCHEMA = 2  # domain_specs/<name>.json; 2 added scorer_sha256
READ_SCHEMAS = (1, 2)
SPLITS = ("train", "val", "test")
KEYS = ("name", "data", "id", "inputs", "label", "hidden", "scorer", "score_key", "rubric")
NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")  # a folder and file name, a key of node records, a word on pages
SCORE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
USER_FUNCTION = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
REPORT_KEYS = ("total", "total_correct", "no_answer", "judge_unreadable", "row_scores", "schema_version",
               "question_ids_passed", "question_ids_failed")  # what the report holds beside the score
SPECS_DIR = "domain_specs"
MAX_RECORD = 2**20


@dataclass(frozen=True)
class DomainSpec:
    """A spec as checked: every path absolute."""

    name: str
    data: dict[str, str]  # split -> absolute path of its file
    id: str
    inputs: dict[str, str]  # key the agent sees -> column
    label: str | None
    hidden: tuple[str, ...]
    scorer: str
    score_key: str = "accuracy"
    rubric: str = ""
    sha256: dict[str, str] = field(default_factory=dict)  # split -> digest of its file when the spec was read
    source: str = ""  # the YAML it was read from, for messages
    scorer_sha256: str = ""  # module:function: digest of its file when the spec was read ("" in older records)
    # module:function: its file, set only when the user's own spec file was read here (never kept
    # in a record, which never names code to run)
    scorer_file: str = ""

    def to_dict(self) -> dict:
        kept = {k: v for k, v in asdict(self).items() if k != "scorer_file"}
        return {"schema_version": SPEC_SCHEMA, **kept, "hidden": list(self.hidden)}

    def domain(self) -> Domain:
        base = Path(self.source).parent if self.source else None
        module = Path(self.scorer_file) if self.scorer_file else None
        return Domain(
            name=self.name, question_id=self.id, inputs=dict(self.inputs), label_column=self.label,
            hidden_columns=tuple(dict.fromkeys((*self.hidden, *([self.label] if self.label else [])))),
            subsets={f"_{s}": Path(p).name for s, p in self.data.items()}, splits={s: f"_{s}" for s in self.data},
            score_key=self.score_key, data_dir=base, default_subset="train", loader=self.load,
            scorer=SpecScorer(self.scorer, self.score_key, self.label, tuple(self.inputs.items()), self.rubric,
                              module, self.scorer_sha256),
            try_match="math" if self.scorer == "math_verify" else "label",
            score_note=f"the mean of the rows' scores by {self.scorer}, as the spec {self.source or self.name} says")

    def load(self, suffix: str) -> pd.DataFrame:
        """The rows of a split (suffix `_train`), refused when the file changed since the spec was read."""
        split = suffix.lstrip("_")
        path = Path(self.data[split])
        if not path.is_file():
            raise UserError(f"data file not found: {path} (the {split} split of domain {self.name})")
        digest = sha256_file(path)
        if self.sha256.get(split, digest) != digest:
            raise UserError(f"{path} changed since domain {self.name} was defined "
                            f"(sha256 {self.sha256[split][:12]}..., "
                            f"now {digest[:12]}...): restore it, or start a new run")
        return load_table(path, [self.id, *self.inputs.values(), *([self.label] if self.label else [])])


def scorer_code(path: str | Path) -> str | None:
    """The `module:function` a spec file's scorer names, read as data with nothing imported; None for a built-in
    scorer, or for a file that is no readable spec (`read_spec` then says what is wrong)."""
    try:
        raw = read_yaml(Path(path), "domain spec")
    except UserError:
        return None
    scorer = raw.get("scorer") if isinstance(raw, dict) else None
    return scorer if isinstance(scorer, str) and scorer not in BUILT_IN else None


def read_spec(path: str | Path) -> DomainSpec:
    """The spec at `path`, checked against its data files; a UserError in one line naming the key."""
    path = Path(path).resolve()
    raw = read_yaml(path, "domain spec")
    where = f"domain spec {path}"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping of {', '.join(KEYS)}")
    spec = checked(raw, where, path.parent)
    spec = replace(spec, source=str(path), sha256={s: sha256_file(p) for s, p in spec.data.items()})
    check_data(spec, where)
    if spec.scorer not in BUILT_IN:
        module = scorer_file(spec.scorer, path.parent)
        spec = replace(spec, scorer_file=str(module), scorer_sha256=file_sha256(module, spec.scorer))
        user_function(spec.scorer, module, spec.scorer_sha256)
    return spec


def checked(raw: dict, where: str, base: Path, files: bool = True) -> DomainSpec:
    """The spec's keys, each of the right shape (the data itself is check_data's); `files`: each data
    file must exist (a run's record is read without its data, by the analysis and the dashboard)."""
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    for key in ("name", "data", "id", "inputs", "scorer"):
        if raw.get(key) in (None, "", {}, []):
            raise UserError(f"{where}: key {key!r} is missing")
    name, scorer = _text(raw, "name", where), _text(raw, "scorer", where)
    if not NAME.fullmatch(name):
        raise UserError(f"{where}: key 'name': {name!r} is not a domain name (lower-case letters, digits, _)")
    if scorer not in BUILT_IN and not USER_FUNCTION.fullmatch(scorer):
        raise UserError(f"{where}: key 'scorer': {scorer!r} is none of {', '.join(BUILT_IN)}, nor module:function")
    label = _text(raw, "label", where) if raw.get("label") is not None else None
    if label is None and scorer in ("exact", "math_verify"):
        raise UserError(f"{where}: key 'label' is missing (scorer {scorer} compares with it)")
    rubric = _text(raw, "rubric", where) if raw.get("rubric") is not None else ""
    if (scorer == "llm_judge") != bool(rubric):
        raise UserError(f"{where}: key 'rubric' " + ("is missing (scorer llm_judge follows it)" if not rubric
                                                      else "goes with scorer llm_judge only"))
    score_key = _text(raw, "score_key", where) if raw.get("score_key") is not None else "accuracy"
    if not SCORE_KEY.fullmatch(score_key) or score_key in REPORT_KEYS:
        raise UserError(f"{where}: key 'score_key': {score_key!r} is not a name the report can hold")
    return DomainSpec(name=name, data=_data(raw["data"], where, base, files), id=_text(raw, "id", where),
                      inputs=_inputs(raw["inputs"], where), label=label, hidden=_hidden(raw.get("hidden"), where),
                      scorer=scorer, score_key=score_key, rubric=rubric)


def _secret(spec: DomainSpec) -> dict[str, str]:
    """Each column an agent must not see -> what it is to the spec."""
    return {**{c: "hidden" for c in spec.hidden}, **({spec.label: "label"} if spec.label else {})}


def check_data(spec: DomainSpec, where: str) -> None:
    """Every split's file has the spec's columns and unique ids, no input column is one an agent must
    not see, and no id is such a column or tells one's value on its row."""
    secret = _secret(spec)
    shown = [c for c in secret if c in spec.inputs.values()]
    if shown:
        raise UserError(f"{where}: key 'inputs': column {shown[0]!r} is the {secret[shown[0]]} column, "
                        "never shown to an agent")
    if spec.id in secret or spec.id in spec.inputs.values():
        what = f"the {secret[spec.id]}" if spec.id in secret else "an input"
        raise UserError(f"{where}: key 'id': column {spec.id!r} is {what} column; the id must be a column of its own")
    for path in spec.data.values():
        df = load_table(path)
        for key, columns in (("id", [spec.id]), ("inputs", list(spec.inputs.values())),
                             ("label", [spec.label] if spec.label else []), ("hidden", list(spec.hidden))):
            missing = [c for c in columns if c not in df.columns]
            if missing:
                raise UserError(f"{where}: key {key!r}: column {missing[0]!r} is not in {path} "
                                f"(it has {', '.join(map(repr, df.columns))})")
        twice = df[spec.id][df[spec.id].duplicated()]
        if len(twice):
            raise UserError(f"{where}: key 'id': {list(twice)[0]!r} names two rows of {path}; ids must be unique")
        _check_ids_tell_nothing(df, spec.id, secret, where, path)


def _check_ids_tell_nothing(df: pd.DataFrame, id_column: str, secret: dict[str, str], where: str, path: str) -> None:
    """No row's id is, as the exact scorer compares text, its own label or hidden value."""
    ids = df[id_column].astype(str).str.strip().str.casefold()
    for column, what in secret.items():
        same = ids == df[column].astype(str).str.strip().str.casefold()
        if same.any():
            row = list(df.loc[same, id_column])[0]
            raise UserError(f"{where}: key 'id': row {row!r} of {path}: its id equals its {what} column "
                            f"{column!r}; an id must tell nothing an agent must not see")


def _text(raw: dict, key: str, where: str) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: key {key!r}: expected text, got {value!r:.60}")
    return value


def _data(value: object, where: str, base: Path, files: bool) -> dict[str, str]:
    if not isinstance(value, dict) or "train" not in value:
        raise UserError(f"{where}: key 'data': expected a mapping of splits to files, train among them")
    data = {}
    for split, file in value.items():
        if split not in SPLITS:
            raise UserError(f"{where}: key 'data': unknown split {split!r} (known: {', '.join(SPLITS)})")
        if not isinstance(file, str) or not file:
            raise UserError(f"{where}: key 'data.{split}': expected a file name, got {file!r:.60}")
        path = (base / file).resolve()
        if path.suffix.lower() not in TABLE_FORMATS:
            raise UserError(f"{where}: key 'data.{split}': {file} is not a {', '.join(TABLE_FORMATS)} file")
        if files and not path.is_file():
            raise UserError(f"{where}: key 'data.{split}': no such file {path}")
        data[split] = str(path)
    return {s: data[s] for s in SPLITS if s in data}


def _inputs(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise UserError(f"{where}: key 'inputs': expected a mapping of the agent's keys to column names")
    if "domain" in value:
        raise UserError(f"{where}: key 'inputs': 'domain' is the key that names the task to the agent; rename it")
    return dict(value)


def _hidden(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise UserError(f"{where}: key 'hidden': expected a list of column names")
    return tuple(value)


# -- kept in a run's folder ------------------------------------------------------------------
def record_spec(run_dir: Path, spec: DomainSpec) -> None:
    atomic_write_json(Path(run_dir) / SPECS_DIR / f"{spec.name}.json", spec.to_dict())


def run_specs(run_dir: Path) -> list[DomainSpec]:
    """The specs a run kept (none for a run of bundled domains), each checked as a record."""
    folder = Path(run_dir) / SPECS_DIR
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            raw = parse_json(read_bounded(path, MAX_RECORD))
        except (OSError, ValueError) as e:
            raise UserError(f"{path}: not a domain spec record ({str(e)[:200]})") from None
        if not isinstance(raw, dict) or raw.pop("schema_version", None) not in READ_SCHEMAS:
            raise UserError(f"{path}: not a domain spec record of schema {SPEC_SCHEMA}")
        where = f"domain spec record {path}"
        spec = checked({k: raw[k] for k in KEYS if raw.get(k) not in (None, "")}, where, Path("/"), files=False)
        digests, scorer_digest = raw.get("sha256"), raw.get("scorer_sha256", "")
        if spec.name != path.stem or not isinstance(digests, dict) or set(digests) != set(spec.data):
            raise UserError(f"{where}: its name or its data's digests do not match its file")
        if not all(isinstance(d, str) for d in (*digests.values(), scorer_digest)):
            raise UserError(f"{where}: a digest that is not text")
        found.append(replace(spec, sha256=dict(digests), source=str(raw.get("source", "")),
                             scorer_sha256=scorer_digest))
    return found


def differs(kept: DomainSpec, given: DomainSpec) -> str | None:
    """What of `given` (the user's spec file) is not as a run `kept` it, or None when it is the same
    domain: its keys, its data's digests (the files may have moved) and its scorer file's digest."""
    for key in ("name", "id", "inputs", "label", "hidden", "scorer", "score_key", "rubric"):
        if getattr(kept, key) != getattr(given, key):
            return f"key {key!r}"
    changed = sorted(s for s in {*kept.sha256, *given.sha256} if kept.sha256.get(s) != given.sha256.get(s))
    if changed:
        return f"the data of split {changed[0]} (sha256)"
    if kept.scorer_sha256 and kept.scorer_sha256 != given.scorer_sha256:
        return f"the file of scorer {given.scorer} (sha256)"
    return None
