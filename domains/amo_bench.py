"""AMO-Bench (Meituan LongCat, 2025): 50 original olympiad problems with short answers.

Not bundled: the data comes from its published location, the Hugging Face dataset
`meituan-longcat/AMO-Bench`, when the network allows, or from a file the user gives
(`--data PATH`, JSONL or parquet with the dataset's columns: question_id, prompt,
answer, answer_type and optionally solution).

Grading follows the benchmark, by answer type:
- number, set: math-verify, numbers compared after rounding to 4 decimals;
- variable: math-verify, or equal values of both expressions at random points (sympy);
- description: the majority of 5 LLM judges (role `judge`, through the gateway).
When the whole final answer does not match, its last expression (after the last `=`) is
tried too, since models often answer "x = 5" for "5".
"""

from __future__ import annotations

import importlib.util
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pandas as pd

from inside.answers import final_answer, math_equal
from services.errors import UserError

HF_DATASET = "meituan-longcat/AMO-Bench"
COLUMNS = ("question_id", "prompt", "answer", "answer_type")
ANSWER_TYPES = ("number", "set", "variable", "description")
ROUNDING = 4
JUDGES = 5
SUBSTITUTION_POINTS = 5

Judge = Callable[[str], str]  # prompt -> the judge's reply


def load(path: str | None) -> pd.DataFrame:
    """The problems from `path`, else from Hugging Face; UserError saying how to get them.

    A run loads a domain's data many times (split sizes, estimate, each evaluation): the
    file is read, or Hugging Face asked, once per process."""
    return _load_once(path).copy()


@lru_cache(maxsize=None)
def _load_once(path: str | None) -> pd.DataFrame:
    if path:
        return _read(Path(path))
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(HF_DATASET, repo_type="dataset", allow_patterns=["*.jsonl", "*.parquet",
                                                                                         "*.json"]))
        files = sorted(p for p in folder.rglob("*") if p.suffix in (".jsonl", ".parquet", ".json"))
        if files:
            return pd.concat([_read(p) for p in files], ignore_index=True)
    except Exception:
        pass
    raise UserError(f"AMO-Bench is not bundled and Hugging Face ({HF_DATASET}) cannot be reached: download it "
                    f"there and pass --data PATH (JSONL or parquet with columns {', '.join(COLUMNS)})")


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise UserError(f"--data {path}: no such file")
    if path.suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise UserError(f"--data {path}: reading parquet needs pyarrow (pip install pyarrow), or give the JSONL")
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_json(path, lines=path.suffix == ".jsonl")
    except Exception as e:
        raise UserError(f"--data {path}: cannot read it as {path.suffix.lstrip('.') or 'JSONL'}: "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"--data {path} lacks column(s) {', '.join(missing)} (AMO-Bench has {', '.join(COLUMNS)})")
    df = df.astype({c: str for c in df.columns})
    unknown = sorted(set(df["answer_type"]) - set(ANSWER_TYPES))
    if unknown:
        raise UserError(f"--data {path}: unknown answer_type {unknown[0]!r} (expected {', '.join(ANSWER_TYPES)})")
    return df


# -- grading ---------------------------------------------------------------------------------
def strip_box(answer: str) -> str:
    """A reference written as \\boxed{...} (as the dataset writes it) without the box."""
    from inside.answers import extract_boxed

    return extract_boxed(answer) or answer.strip()


def last_expression(answer: str) -> str:
    """What follows the last `=` (or \\Rightarrow) of an answer: "x = 5" -> "5"."""
    return re.split(r"=|\\Rightarrow|\\implies", answer)[-1].strip()


def same_values(prediction: str, truth: str) -> bool:
    """Both expressions take the same values at random points of their variables."""
    import sympy
    from math_verify import parse

    exprs = []
    for text in (prediction, truth):
        parsed = [p for p in parse(f"${text}$", parsing_timeout=None) if isinstance(p, sympy.Basic)]
        if not parsed:
            return False
        exprs.append(parsed[0])
    if isinstance(exprs[0], sympy.Eq) or isinstance(exprs[1], sympy.Eq):
        return False
    symbols = sorted(exprs[0].free_symbols | exprs[1].free_symbols, key=str)
    if not symbols:
        return False
    rng = random.Random(0)
    for _ in range(SUBSTITUTION_POINTS):
        point = {s: sympy.Rational(rng.randint(1, 97), rng.randint(1, 13)) for s in symbols}
        try:
            a, b = (complex(sympy.N(e.subs(point), 30)) for e in exprs)
        except (TypeError, ValueError, ZeroDivisionError):
            return False
        if abs(a - b) > 1e-9 * max(1.0, abs(a), abs(b)):
            return False
    return True


def judge_prompt(problem: str, truth: str, answer: str) -> str:
    return f"""You check answers to a competition math problem against the reference answer.

# Problem
{problem}

# Reference answer
{truth}

# Candidate's final answer
{answer}

Does the candidate's answer say the same as the reference answer (same objects, same values, nothing
missing or extra)? Reply with one word: "correct" or "incorrect"."""


def judged_correct(judge: Judge, problem: str, truth: str, answer: str) -> bool:
    votes = [judge(judge_prompt(problem, truth, answer)).strip().lower() for _ in range(JUDGES)]
    yes = sum(1 for v in votes if v.startswith("correct") or v.endswith(" correct") or v == "correct.")
    return yes > JUDGES // 2


def check(output: str, row: dict, judge: Judge | None = None) -> bool:
    """Whether an output's final answer is right for an AMO-Bench row."""
    answer = final_answer(output) or (output or "").strip()
    if not answer:
        return False
    truth = strip_box(str(row["answer"]))
    kind = str(row["answer_type"])
    for candidate in dict.fromkeys((answer, last_expression(answer))):
        if kind == "description":
            if judge is None:
                raise ValueError("description answers need LLM judges (role judge)")
            if judged_correct(judge, str(row["prompt"]), truth, candidate):
                return True
        elif math_equal(candidate, truth, float_rounding=ROUNDING):
            return True
        elif kind == "variable" and same_values(candidate, truth):
            return True
    return False
