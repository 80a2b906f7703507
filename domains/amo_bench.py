"""AMO-Bench (Meituan LongCat, 2025): 50 original olympiad problems with short answers.

Not bundled: the data comes from its published location, the Hugging Face dataset
`meituan-longcat/AMO-Bench`, when the network allows, or from a file the user gives
(`--data PATH`, JSONL or parquet with the dataset's columns: question_id, prompt,
answer, answer_type and optionally solution).

Grading is the official grader's (github.com/meituan-longcat/AMO-Bench, commit 52e1f37,
`grading.py` and `utils.py`), by answer type:
- number, set, variable: by rule, as `domains/amo_grading.py` describes item by item (answer
  extraction after `</think>` and "### The final answer is:", the retry cut at \\medskip,
  math-verify both ways, variables solved at the official integer points), each check in a
  child process that is killed past its time (`domains/amo_bounded.py`);
- description: 5 LLM judges (role `judge`, through the gateway, temperature 1), a majority of
  "Correct" verdicts. Each judge gets the problem, the reference answer as the dataset writes it
  and the extracted answer (the prompt cut to its first and last 10,000 characters when it
  reaches 20,000), and ends its reply with "### Conclusion: Correct" or "### Conclusion:
  Incorrect". The prompt is ours, with the official one's sections and rules; its verdict is read
  as the official reads it (`verdict`). No cut retry for descriptions, as in the official.

Departures: an empty answer is wrong without asking the judges; the judge model is the run's
(`models.judge`), where the official calls o4-mini with low reasoning effort; a judge call that
fails stops the scoring (an infrastructure event, never a wrong answer), where the official
counts it as a wrong answer.
"""

from __future__ import annotations

import atexit
import importlib.util
import io
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pandas as pd

from domains.amo_bounded import BoundedChecker
from domains.amo_grading import extract
from services.errors import UserError
from services.fsutil import read_regular

MAX_DATA_BYTES = 2**28  # AMO-Bench is well under 1 MiB; a bigger --data file is not it

HF_DATASET = "meituan-longcat/AMO-Bench"
COLUMNS = ("question_id", "prompt", "answer", "answer_type")
ANSWER_TYPES = ("number", "set", "variable", "description")
JUDGES = 5  # votes per description answer, at temperature 1 (domains/judge.py)
PROMPT_LIMIT = 20000  # a judge prompt this long keeps its first and last half of it

Judge = Callable[[str], str]  # prompt -> the judge's reply


def load(path: str | None) -> pd.DataFrame:
    """The problems from `path`, else from Hugging Face; UserError saying how to get them.

    A run loads a domain's data many times (split sizes, estimate, each evaluation): the
    file is read, or Hugging Face asked, once per process."""
    return _load_once(path).copy()


@cache
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
    try:  # a regular file of bounded size: a fifo would block, /dev/zero would never end
        data = io.BytesIO(read_regular(path, MAX_DATA_BYTES, follow_links=True))
    except FileNotFoundError:
        raise UserError(f"--data {path}: no such file") from None
    except OSError as e:
        raise UserError(f"--data {path}: cannot read it: {e.strerror or e}") from None
    if path.suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise UserError(f"--data {path}: reading parquet needs pyarrow (pip install pyarrow), or give the JSONL")
    try:
        df = pd.read_parquet(data) if path.suffix == ".parquet" else pd.read_json(data, lines=path.suffix == ".jsonl")
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
def judge_prompt(problem: str, truth: str, answer: str) -> str:
    """What each judge reads: the official prompt's sections and rules, in our words."""
    prompt = f"""You check answers to a competition math problem against the reference answer.
You get the problem, its reference answer and a student's final answer. Say "Correct" when the student's answer
means the same as the reference (the same mathematical content, however written), else "Incorrect".

### Problem
{problem}

### Reference Answer
{truth}

### Student Answer
{answer}

Explain your judgment, then close it with one last line in exactly this form:
### Conclusion: Correct/Incorrect
A decimal value counts as the reference only when it agrees with it to four decimal places or more."""
    if len(prompt) >= PROMPT_LIMIT:
        prompt = prompt[:PROMPT_LIMIT // 2] + "\n\n...\n\n" + prompt[-(PROMPT_LIMIT // 2):]
    return prompt


def verdict(reply: str) -> bool:
    """Whether a judge's reply is a "correct" vote, read as the official grader reads it: the text
    after its last "conclusion:", lowercased, must have "correct" as a word of its own, and neither
    "not correct" nor "n't correct" anywhere ("Incorrect", "It is not correct" and "isn't correct"
    are no votes; so is "Correct." with its full stop, as there)."""
    conclusion = (reply or "").lower().split("conclusion:")[-1]
    return "correct" in conclusion.split() and "not correct" not in conclusion and "n't correct" not in conclusion


def judged_correct(judge: Judge, problem: str, truth: str, answer: str) -> bool:
    """The majority of JUDGES verdicts on one answer."""
    prompt = judge_prompt(problem, truth, answer)
    yes = sum(verdict(judge(prompt)) for _ in range(JUDGES))
    return yes > JUDGES - yes


_checker = BoundedChecker()
atexit.register(_checker.close)


def check(output: str, row: dict, judge: Judge | None = None) -> bool:
    """Whether an output's final answer is right for an AMO-Bench row."""
    kind = str(row["answer_type"])
    if not (output or "").strip():
        return False
    if kind != "description":
        return _checker(output, str(row["answer"]), kind, str(row["question_id"]))
    if judge is None:
        raise ValueError("description answers need LLM judges (role judge)")
    answer = extract(output, kind)
    return bool(answer) and judged_correct(judge, str(row["prompt"]), str(row["answer"]), answer)
