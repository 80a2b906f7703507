"""SC-TIR, self-consistency with tool-integrated reasoning, for final-answer domains.

The recipe the NuminaMath team used to win the first AIMO progress prize (48 candidates,
depth 4 there; smaller constants here because every candidate call is a paid API call):

1. Start NUM_CANDIDATES independent conversations on the same prompt, sampled at
   TEMPERATURE so that they differ.
2. Each candidate reasons until it closes a ```python block. The block runs in a fresh
   Python process; its output, or the end of its traceback, goes back as an ```output
   block and the candidate continues. At most MAX_DEPTH blocks run per candidate.
3. A candidate ends with a reply that has no code block. Its answer is the last
   \\boxed{...} of that reply; a candidate with no answer there, or an empty one, is dropped.
4. The prediction is the majority of the normalized answers of the survivors, the
   earliest candidate's answer on a tie; "None" when no candidate survives.

Candidates run concurrently, one thread each; a candidate's own calls are sequential.
Code runs in a `sys.executable` subprocess, never in this process: the agent itself runs
in the framework's sandbox, so the subprocess inherits that sandbox, and a crash, a hang
or a flood of output of model-written code only ends that one run.
"""

from __future__ import annotations

import contextvars
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agent.base_agent import AgentSystem
from agent.llm import get_response

DOMAINS = ("imo_answer", "aime2025", "amo_bench")
NUM_CANDIDATES = 8  # conversations voted on per problem
MAX_DEPTH = 4  # code blocks run per candidate; its model calls are at most MAX_DEPTH + 1
TEMPERATURE = 0.8  # candidates must differ for the vote to mean anything
CODE_TIMEOUT_S = 10  # wall clock per code block, interpreter start included
OUTPUT_CAP = 4000  # characters of a block's output the model sees, notes included
READ_LIMIT = 64 * 1024  # bytes read from a block before it is killed as a flood
TRACEBACK_LINES = 4  # the failing line, its marker and the error; the call chain above is noise

# "```output" is where a model that imitates the format would start inventing the result.
_STOP = ["```output"]
# Fences at the start of a line, so a "```" inside a Python string does not end the block.
_CODE = re.compile(r"^[ \t]*```(?:python3?|py)[ \t]*\n(.*?)^[ \t]*```", re.S | re.M)
_BOXED = "\\boxed{"
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")
_SLASH = re.compile(r"^(-?)(\d+)/(\d+)$")
_DELIMITER_SIZE = re.compile(r"\\(?:left|right)(?![a-zA-Z])")  # not \leftarrow
_WHOLE_FLOAT = re.compile(r"^(-?\d+)\.0*$")


def extract_code(text: str) -> str | None:
    """The code of the first complete ```python block, or None."""
    match = _CODE.search(text or "")
    return textwrap.dedent(match.group(1)) if match else None


def cut_after_code(text: str) -> str:
    """`text` up to the end of its first complete code block: anything after it was written
    before the code ran, so it cannot be about its output."""
    match = _CODE.search(text or "")
    return text[: match.end()] if match else text


def extract_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, nested braces allowed; None if there is none or
    it is never closed (a cut-off final answer must not let an earlier draft win)."""
    start = (text or "").rfind(_BOXED)
    if start == -1:
        return None
    depth, begin = 1, start + len(_BOXED)
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i]
    return None


def normalize_answer(text: str) -> str:
    """The form answers are compared in: `$ 42.0 $`, `\\frac{84}{2}` and `42` are one vote."""
    s = _DELIMITER_SIZE.sub("", (text or "").replace("$", ""))
    s = re.sub(r"\\[,;:!]", "", s)  # thin spaces, as in 1\,000
    s = re.sub(r"\s*([^\w\s\\])\s*", r"\1", s.strip())  # spaces around symbols carry no meaning
    s = re.sub(r"\s+", " ", s)
    if match := _WHOLE_FLOAT.match(s):
        return str(int(match.group(1)))
    if match := _FRAC.match(s) or _SLASH.match(s):
        sign, num, den = match.group(1), int(match.group(2)), int(match.group(3))
        if den != 0 and num % den == 0:
            return str(-(num // den) if sign else num // den)
    return s


def majority_vote(answers: list[str]) -> str | None:
    """The most frequent normalized non-empty answer, the first one seen on a tie; None if none."""
    counts = Counter(a for a in map(normalize_answer, answers) if a)
    # Counter keeps first-seen order and max() returns the first maximum: ties go to the earliest.
    return max(counts, key=counts.get) if counts else None


def _read_output(proc: subprocess.Popen, deadline: float) -> tuple[bytes, str | None]:
    """The program's output until it exits; the reason when it had to be stopped first."""
    fd, chunks, size = proc.stdout.fileno(), [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), "timeout"
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > READ_LIMIT:
            return b"".join(chunks), "flood"
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return b"".join(chunks), "timeout"  # it closed its output but kept running
    return b"".join(chunks), None


def _format_output(text: str, stopped: str | None, timeout_s: float) -> str:
    """What the model sees: stdout, the last lines of a traceback, and a note when cut or
    stopped, within OUTPUT_CAP characters in all."""
    body, marker, trace = text.partition("Traceback (most recent call last):")
    tail = "\n".join(trace.strip().splitlines()[-TRACEBACK_LINES:])[-OUTPUT_CAP // 2:] if marker else ""
    notes = {
        "timeout": f"[stopped: the program ran longer than {timeout_s:g} s]",
        "flood": f"[stopped: the program printed more than {READ_LIMIT // 1024} KB]",
    }
    too_long = len(body) + len(tail) + 1 > OUTPUT_CAP
    note = notes.get(stopped) or (f"[output cut: the program printed more than {OUTPUT_CAP} characters]"
                                  if too_long else "")
    body = body[: OUTPUT_CAP - len(tail) - len(note) - 2]
    kept = "\n".join(part for part in (body.rstrip("\n"), note, tail) if part)
    return kept or "[no output: print what you want to see]"


def _child_env(home: str) -> dict:
    # No API keys or gateway address: model-written code has no business calling a model.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "OMP_NUM_THREADS": "1"}


def run_code(code: str, timeout_s: float = CODE_TIMEOUT_S) -> str:
    """Run `code` in a fresh interpreter in a temporary folder; its output as the model should
    see it. The whole process group is killed after `timeout_s` or a flood of output."""
    with tempfile.TemporaryDirectory(prefix="sc_tir_") as workdir:
        Path(workdir, "solution.py").write_text(code, encoding="utf-8")
        proc = subprocess.Popen(
            # -I: the agent's PYTHONPATH and user site stay out; -u: output printed before a
            # timeout is not lost in a buffer.
            [sys.executable, "-I", "-u", "-X", "utf8", "solution.py"],
            cwd=workdir, env=_child_env(workdir), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            raw, stopped = _read_output(proc, time.monotonic() + timeout_s)
        finally:
            # Also after a normal exit: processes the code started in the background die with it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.stdout.close()
            proc.wait()
    # Tracebacks name the script by its absolute path; the temporary folder is noise to the model.
    text = raw.decode("utf-8", "replace").replace(os.path.realpath(workdir) + os.sep, "")
    return _format_output(text, stopped, timeout_s)


def solve_prompt(problem: str) -> str:
    return f"""Solve the competition problem below. Its answer is a number or a short closed-form expression.

You can run Python to compute, enumerate cases, test small instances or check algebra. To run code, write one block
```python
...
```
and stop right after it. The block runs in a new Python process, and what it prints comes back to you
in an ```output block. Nothing is kept between blocks, so each block must define everything it uses and print
what you want to see. A run is stopped after {CODE_TIMEOUT_S:g} seconds. The standard library, numpy and sympy are
available. You can run code at most {MAX_DEPTH} times.

Think between runs: use the output to check or correct your reasoning, and do not trust a number you cannot explain.
When you are sure, write the final answer, and only the answer, as \\boxed{{...}}.

# Problem
{problem}
"""


def output_message(output: str, runs_left: int) -> str:
    if runs_left:
        after = f"Continue. You can run code {runs_left} more time{'s' if runs_left > 1 else ''}."
    else:
        after = "You cannot run more code. Finish the solution and give the final answer as \\boxed{...}."
    return f"```output\n{output}\n```\n{after}"


@dataclass
class Candidate:
    messages: list[dict]  # the shared prompt, then this candidate's turns
    answer: str | None = None  # normalized; None when the candidate is dropped
    runs: int = 0  # code blocks run
    error: str = ""  # the call that failed, when one did

    def outcome(self) -> str:
        if self.error:
            return f"failed: {self.error}"
        return f"answer {self.answer}" if self.answer else "dropped: no boxed answer"


class TaskAgent(AgentSystem):
    def forward(self, inputs: dict):
        domain = inputs.get("domain", "")
        if domain not in DOMAINS:
            raise ValueError(f"sc_tir answers problems of {', '.join(DOMAINS)}, not domain {domain!r}")
        prompt = {"role": "user", "content": solve_prompt(inputs.get("problem", ""))}

        with ThreadPoolExecutor(max_workers=NUM_CANDIDATES) as pool:
            # Each candidate runs in a copy of this thread's context: a caller that keeps per-row
            # state in contextvars (usage counters, say) then sees the candidates' calls as its own.
            futures = [pool.submit(contextvars.copy_context().run, self._candidate, prompt)
                       for _ in range(NUM_CANDIDATES)]
            candidates = [f.result() for f in futures]
        if all(c.error for c in candidates):
            # Every call failing is the provider's failure, not a problem without an answer.
            raise RuntimeError(f"all {NUM_CANDIDATES} candidates failed; first: {candidates[0].error}")

        history = [prompt]
        self.log_messages([prompt])
        for i, c in enumerate(candidates, 1):
            self.log(f"# candidate {i}: {c.runs} code runs, {c.outcome()}")
            self.log_messages(c.messages[1:])
            history.extend(c.messages[1:])

        prediction = majority_vote([c.answer for c in candidates if c.answer]) or "None"
        self.log(f"## prediction\n\n{prediction}")
        return prediction, history

    def _candidate(self, prompt: dict) -> Candidate:
        """One conversation: reason, run code, read its output, until a reply without code."""
        messages = [prompt]
        runs = 0
        try:
            while True:
                reply = get_response(messages, model=self.model, temperature=TEMPERATURE, stop=_STOP)
                text = cut_after_code(reply.text)
                messages.append({"role": "assistant", "content": text})
                code = extract_code(text)
                if code is None or runs == MAX_DEPTH:
                    break
                runs += 1
                messages.append({"role": "user", "content": output_message(
                    run_code(code, timeout_s=CODE_TIMEOUT_S), MAX_DEPTH - runs)})
        except Exception as e:  # one failed call drops one candidate, not the vote
            return Candidate(messages, runs=runs, error=f"{type(e).__name__}: {e}"[:500])
        boxed = extract_boxed(text)
        return Candidate(messages, normalize_answer(boxed) if boxed is not None else None, runs)
