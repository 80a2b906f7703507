"""SC-TIR, self-consistency with tool-integrated reasoning, for final-answer domains.

The NuminaMath recipe that won the first AIMO progress prize (github.com/project-numina/
aimo-progress-prize, `kaggle-solution.ipynb`, commit 712e1ab), in two presets (PRESETS; PRESET
is the one `TaskAgent` uses; `RecipeTaskAgent` uses the recipe's):

- `recipe`: 48 traces at temperature 0.8, 4 calls each of at most 2048 new tokens, 5 s per code
  block. A call stops where the model opens an ```output block; the trace's last ```python block
  runs (after `import math`, numpy as np, sympy as sp; a last line without `print(` is printed);
  its output, or its traceback reduced to the script's frames, cut to 200 characters + " ...
  (output truncated)", comes back. After each call, in this order: a trace without any code
  block starts over (the call is spent); a call that does not wait for output and has `\\boxed`
  or "answer is" in the trace's last 100 characters ends it with that answer (dropped if no code
  ran); the last call ends it; a call that neither waits nor answers starts it over. Answers are
  read as numbers and rounded (the recipe's 0.2 tolerance test compares the rounded value with
  itself: 3.6 counts as 4), negatives and non-numbers dropped, mod 1000; the most frequent wins,
  the earliest on a tie; none at all is 0.
- `light`, ours, the default: 8 traces, 5 calls each (4 code runs), 10 s and 4,000 characters of
  output per block, tracebacks cut to their last lines, no token limit. A reply without code ends
  the trace with its last \\boxed{} (no code required, no restart); answers of any kind vote after
  `normalize_answer`; none at all is "None". Why: a recipe problem is up to 48 x 4 calls of 2048
  tokens (dollars per problem with an API model, days with a local model on 2 CPU cores), and its
  filter fits AIMO only (integers 0-999, as aime2025), not the sets, expressions and descriptions
  of imo_answer and amo_bench.

Both adapt the recipe's raw-text generation to a chat API: outputs come back as user messages, our
prompt asks for the code format (the recipe's model was fine-tuned to it), `stop` is emulated, a
trace ends at its answer, a timeout reads as our note. Code runs one process per CPU at a time (as
the recipe's executor), each a fresh `sys.executable` in a temporary folder inside the framework's
sandbox; a crash, hang or flood (READ_LIMIT) ends that run only. The 5 s include the imports.
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
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agent.base_agent import AgentSystem
from agent.llm import get_response

DOMAINS = ("imo_answer", "aime2025", "amo_bench")


@dataclass(frozen=True)
class Settings:
    """One way to run SC-TIR (see PRESETS)."""

    candidates: int  # traces voted on per problem (the recipe's width)
    depth: int  # model calls per trace (the recipe's generations); code runs at most depth - 1 times
    temperature: float  # traces must differ for the vote to mean anything
    max_tokens: int | None  # new tokens per call; None: the provider's own limit
    code_timeout_s: float  # wall clock per code block, interpreter start included
    output_chars: int  # characters of a block's output the model sees
    recipe_rules: bool  # the recipe's trace rules, code prelude, output and answer filter; else ours


LIGHT = Settings(candidates=8, depth=5, temperature=0.8, max_tokens=None, code_timeout_s=10, output_chars=4000,
                 recipe_rules=False)
NUM_CANDIDATES, MAX_DEPTH, TEMPERATURE = LIGHT.candidates, LIGHT.depth, LIGHT.temperature  # bench/ reads them
RECIPE = Settings(candidates=48, depth=4, temperature=0.8, max_tokens=2048, code_timeout_s=5, output_chars=200,
                  recipe_rules=True)
PRESETS = {"light": LIGHT, "recipe": RECIPE}
PRESET = "light"

READ_LIMIT = 64 * 1024  # bytes read from a block before it is killed as a flood
TRACEBACK_LINES = 4  # the failing line, its marker and the error; the call chain above is noise
ANSWER_WINDOW = 100  # recipe: the end of a trace, in characters, where its answer is looked for
RECIPE_PRELUDE = "import math\nimport numpy as np\nimport sympy as sp\n"
TRUNCATED = " ... (output truncated)"
AIMO_MODULUS = 1000

# "```output" is where a model that imitates the format would start inventing the result.
_STOP = "```output"
# Fences at the start of a line, so a "```" inside a Python string does not end the block.
_CODE = re.compile(r"^[ \t]*```(?:python3?|py)[ \t]*\n(.*?)^[ \t]*```", re.S | re.M)
_BOXED = "\\boxed{"
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")
_SLASH = re.compile(r"^(-?)(\d+)/(\d+)$")
_DELIMITER_SIZE = re.compile(r"\\(?:left|right)(?![a-zA-Z])")  # not \leftarrow
_WHOLE_FLOAT = re.compile(r"^([+-]?\d+)(?:\.0*)?$")  # 70, +70, 070, 70.0: one integer
_TEXT = re.compile(r"\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}")
_UNIT = re.compile(r"(?:\^\\circ|\^\{\\circ\}|\\%|%|[A-Za-z]+)$")
# Digits in \text{}, \mathrm{} and the like, or under \overline{} (digit notation: not 0.\overline{3}, a repeating decimal).
_NUMBER_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{\s*(-?\d[\d.,]*)\s*\}"
                             r"|(?<![\d.])\\overline\s*\{\s*(\d+)\s*\}")
# What separates digit groups: LaTeX thin spaces, {,}, and the thin and no-break space characters.
_GROUP_SPACE = re.compile(r"(?<=\d)(?:\\[,;:!]|\{,\}|[\u2009\u202f\u00a0])(?=\d{3}(?!\d))")
_NOTES = {"timeout": "[stopped: the program ran longer than {:g} s]",
          "flood": f"[stopped: the program printed more than {READ_LIMIT // 1024} KB]"}
_RUNS = threading.BoundedSemaphore(os.cpu_count() or 1)  # code runs at a time, on all traces


def extract_code(text: str, last: bool = False) -> str | None:
    """The code of the first (or last) complete ```python block, or None."""
    blocks = _CODE.findall(text or "")
    return textwrap.dedent(blocks[-1 if last else 0]) if blocks else None


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


def bare_number(text: str | None) -> str:
    """`text` without what only dresses a number: dollar signs (escaped too, \\$70), separators of
    digit groups (70\\,000, 70{,}000, a thin space), and \\text{}, \\mathrm{} or \\overline{} around digits."""
    s = _GROUP_SPACE.sub("", re.sub(r"\\?\$", "", text or ""))
    while (unwrapped := _NUMBER_WRAPPER.sub(lambda m: m[1] or m[2], s)) != s:
        s = unwrapped
    return s


def normalize_answer(text: str) -> str:
    """The form answers are compared in: `$ 42.0 $`, `\\frac{84}{2}`, `\\text{42}`, `+42`, `042` and `42` are one vote."""
    s = _DELIMITER_SIZE.sub("", bare_number(text))
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


def majority_vote(answers: list[str | None]) -> str | None:
    """The most frequent normalized non-empty answer, the first one seen on a tie; None if none."""
    counts = Counter(a for a in map(normalize_answer, answers) if a)
    # Counter keeps first-seen order and max() returns the first maximum: ties go to the earliest.
    return max(counts, key=counts.get) if counts else None


def aimo_integer(answer: str | None) -> int | None:
    """An answer as the recipe's filter keeps it: a number (what bare_number takes off, spaces, \\text{}
    wrappers, a trailing unit or degree sign and digit-group commas aside) rounded to an integer, mod
    1000; None for a negative number or anything else."""
    s = re.sub(r"\\[,;!]|\{,\}|\s", "", _TEXT.sub(r"\1", bare_number(answer))).lstrip(":")
    s = _UNIT.sub("", s.rstrip("."))
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    try:
        value = round(float(s))
    except (ValueError, OverflowError):
        return None
    return value % AIMO_MODULUS if value >= 0 else None


def aimo_vote(answers: list[str | None]) -> str:
    """The recipe's prediction: the most frequent kept integer, the first one seen on a tie; "0" if none."""
    kept = [v for v in map(aimo_integer, answers) if v is not None]
    return str(Counter(kept).most_common(1)[0][0]) if kept else "0"


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


def _format_output(text: str, stopped: str | None, timeout_s: float, cap: int) -> str:
    """What the model sees (light): stdout, the last lines of a traceback, and a note when cut or
    stopped, within `cap` characters in all."""
    body, marker, trace = text.partition("Traceback (most recent call last):")
    tail = "\n".join(trace.strip().splitlines()[-TRACEBACK_LINES:])[-cap // 2:] if marker else ""
    too_long = len(body) + len(tail) + 1 > cap
    note = _NOTES.get(stopped or "", "").format(timeout_s) or (
        f"[output cut: the program printed more than {cap} characters]" if too_long else "")
    body = body[: cap - len(tail) - len(note) - 2]
    kept = "\n".join(part for part in (body.rstrip("\n"), note, tail) if part)
    return kept or "[no output: print what you want to see]"


def _recipe_output(text: str, stopped: str | None, failed: bool, timeout_s: float, cap: int) -> str:
    """What the model sees (recipe): the printed output, or for a failed program only its traceback's
    first line, the frames of the script with their source lines, and the error; cut to `cap`."""
    if stopped == "timeout":
        shown = _NOTES[stopped].format(timeout_s)
    elif failed and "Traceback (most recent call last):" in text:
        lines = text[text.index("Traceback (most recent call last):"):].strip().splitlines()
        keep = {0, len(lines) - 1}
        for i, line in enumerate(lines):
            if '"solution.py"' in line:
                keep |= {i, i + 1}
        shown = "\n".join(lines[i] for i in sorted(keep) if i < len(lines))
    else:
        shown = text.strip()
    return shown[:cap] + TRUNCATED if len(shown) > cap else shown


def recipe_code(code: str) -> str:
    """The program the recipe runs for a block: its imports first, and a last line without
    `print(` printed (its comment dropped)."""
    lines = (RECIPE_PRELUDE + code).strip().split("\n")
    if "print(" not in lines[-1]:
        lines[-1] = f"print({lines[-1].split('#')[0]})"
    return "\n".join(lines)


def run_code(code: str, timeout_s: float = LIGHT.code_timeout_s, cap: int = LIGHT.output_chars,
             recipe: bool = False) -> str:
    """Run `code` in a fresh interpreter in a temporary folder; its output as the model should
    see it. The whole process group is killed after `timeout_s` or a flood of output."""
    with _RUNS, tempfile.TemporaryDirectory(prefix="sc_tir_") as workdir:
        Path(workdir, "solution.py").write_text(recipe_code(code) if recipe else code, encoding="utf-8")
        # No API keys or gateway address: model-written code has no business calling a model.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            # -I: the agent's PYTHONPATH and user site stay out; -u: output printed before a
            # timeout is not lost in a buffer.
            [sys.executable, "-I", "-u", "-X", "utf8", "solution.py"], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
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
    if recipe:
        return _recipe_output(text, stopped, proc.returncode != 0, timeout_s, cap)
    return _format_output(text, stopped, timeout_s, cap)


def solve_prompt(problem: str, settings: Settings = LIGHT) -> str:
    must = "Run code at least once before you answer. " if settings.recipe_rules else ""
    return f"""Solve the competition problem below. Its answer is a number or a short closed-form expression.

You can run Python to compute, enumerate cases, test small instances or check algebra. To run code, write one block
```python
...
```
and stop right after it. The block runs in a new Python process, and what it prints comes back to you
in an ```output block. Nothing is kept between blocks, so each block must define everything it uses and print
what you want to see. A run is stopped after {settings.code_timeout_s:g} seconds. The standard library, numpy and
sympy are available. You can run code at most {settings.depth - 1} times. {must}

Think between runs: use the output to check or correct your reasoning, and do not trust a number you cannot explain.
When you are sure, write the final answer, and only the answer, as \\boxed{{...}}.

# Problem
{problem}
"""


def output_message(output: str, runs_left: int) -> str:
    after = (f"Continue. You can run code {runs_left} more time{'s' if runs_left > 1 else ''}." if runs_left else
             "You cannot run more code. Finish the solution and give the final answer as \\boxed{...}.")
    return f"```output\n{output}\n```\n{after}"


@dataclass
class Candidate:
    messages: list[dict]  # the shared prompt, then this trace's turns (since its last restart)
    answer: str | None = None  # light: normalized; recipe: as read at the end of the trace
    runs: int = 0  # code blocks run, restarted traces included
    restarts: int = 0  # recipe: times the trace started over
    error: str = ""  # the call that failed, when one did

    def outcome(self) -> str:
        again = f", {self.restarts} restarts" if self.restarts else ""
        if self.error:
            return f"failed: {self.error}"
        return (f"answer {self.answer}" if self.answer else "dropped: no boxed answer") + again


class TaskAgent(AgentSystem):
    settings: Settings = PRESETS[PRESET]

    def __init__(self, model: str, chat_history_file: str | None = None, settings: Settings | None = None):
        super().__init__(model, chat_history_file)
        if settings is not None:
            self.settings = settings

    def forward(self, inputs: dict):
        domain, s = inputs.get("domain", ""), self.settings
        if domain not in DOMAINS:
            raise ValueError(f"sc_tir answers problems of {', '.join(DOMAINS)}, not domain {domain!r}")
        prompt = {"role": "user", "content": solve_prompt(inputs.get("problem", ""), s)}

        with ThreadPoolExecutor(max_workers=s.candidates) as pool:
            # Each candidate runs in a copy of this thread's context: a caller that keeps per-row
            # state in contextvars (usage counters, say) then sees the candidates' calls as its own.
            futures = [pool.submit(contextvars.copy_context().run, self._candidate, prompt)
                       for _ in range(s.candidates)]
            candidates = [f.result() for f in futures]
        if all(c.error for c in candidates):
            # Every call failing is the provider's failure, not a problem without an answer.
            raise RuntimeError(f"all {s.candidates} candidates failed; first: {candidates[0].error}")

        history = [prompt]
        self.log_messages([prompt])
        for i, c in enumerate(candidates, 1):
            self.log(f"# candidate {i}: {c.runs} code runs, {c.outcome()}")
            self.log_messages(c.messages[1:])
            history.extend(c.messages[1:])

        answers = [c.answer for c in candidates if not c.error]
        prediction = aimo_vote(answers) if s.recipe_rules else majority_vote(answers) or "None"
        self.log(f"## prediction\n\n{prediction}")
        return prediction, history

    def _candidate(self, prompt: dict) -> Candidate:
        """One trace: reason, run code, read its output, until it answers or its calls are spent."""
        c = Candidate([prompt])
        try:
            step = self._recipe_step if self.settings.recipe_rules else self._light_step
            for call in range(self.settings.depth):
                reply = get_response(c.messages, model=self.model, temperature=self.settings.temperature,
                                     max_tokens=self.settings.max_tokens, stop=[_STOP])
                if step(c, reply.text, last=call == self.settings.depth - 1):
                    break
        except Exception as e:  # one failed call drops one candidate, not the vote
            c.error = f"{type(e).__name__}: {e}"[:500]
        return c

    def _light_step(self, c: Candidate, reply: str, last: bool) -> bool:
        """Ours: run the reply's first code block, or end the trace with its last \\boxed{}. True: it ended."""
        # Up to the end of the first code block: what follows was written before the code ran.
        match = _CODE.search(reply)
        text = reply[: match.end()] if match else reply
        c.messages.append({"role": "assistant", "content": text})
        code = extract_code(text)
        if code is None or last:
            boxed = extract_boxed(text)
            c.answer = normalize_answer(boxed) if boxed is not None else None
            return True
        c.runs += 1
        output = run_code(code, self.settings.code_timeout_s, self.settings.output_chars)
        c.messages.append({"role": "user", "content": output_message(output, self.settings.depth - 1 - c.runs)})
        return False

    def _recipe_step(self, c: Candidate, reply: str, last: bool) -> bool:
        """The recipe's rules after one call, in its order (see the module's docstring). True: it ended."""
        text = reply.split(_STOP)[0]
        c.messages.append({"role": "assistant", "content": text})
        written = "\n".join(m["content"] for m in c.messages[1:] if m["role"] == "assistant")
        # Waiting for an output: the model opened one, or stopped right after a code block.
        blocks = list(_CODE.finditer(text))
        waits = _STOP in reply or bool(blocks and not text[blocks[-1].end():].strip())
        window = "".join(m["content"] for m in c.messages[1:])[-ANSWER_WINDOW:]
        answers = "\\boxed" in window or "answer is" in window
        if extract_code(written) is None or (not waits and not last and not answers):
            c.messages[1:] = []  # start over: the call is spent
            c.restarts += 1
            return False
        if not waits and answers:
            # The last \\boxed{} of the window (None when cut), else what follows "answer is"; none
            # if no code ran: the answer is made up.
            answer = extract_boxed(window) if "\\boxed" in window else window.rsplit("answer is", 1)[-1].strip()
            c.answer = answer if any(m["role"] == "user" for m in c.messages[1:]) else None
            return True
        if last:
            return True
        c.runs += 1
        output = run_code(extract_code(written, last=True), self.settings.code_timeout_s, self.settings.output_chars,
                          recipe=True)
        c.messages.append({"role": "user", "content": f"```output\n{output}\n```"})
        return False


class RecipeTaskAgent(TaskAgent):
    """SC-TIR with the recipe's constants and rules (`from ... import RecipeTaskAgent as TaskAgent`)."""

    settings = RECIPE
