"""Bounded passes over agent text (issue 35): what the host's screens (tamper flags, novelty) share.

Each pass over text an agent wrote runs under a `Budget`: a count of the matches it may look at
and a deadline shared by a node's passes. Running out raises `TooLarge`, which the screen records
as "not screened: too large" instead of stalling the loop. Every pattern here and in the screens
matches a bounded number of characters at each position (no unbounded repeat, no repeat that can
retry its own text), so Python's engine does bounded work per position: the passes are linear in
the text, and the budget bounds how many matches a Python callback sees.

`plain` undoes the obvious spellings before tamper flags match, so that `"\\x41nswer"`, `chr(65)`,
`"dom" "ains"`, `'a' + 'b'` and `D=dom; cat ${D}ains/` read as what they spell. It does not run
anything: text computed at run time (base64, reversed strings, names built in code) stays unread.
"""

from __future__ import annotations

import re
import time

MAX_STEPS = 10_000  # matches one pass hands to Python (escapes decoded, shell words, paths looked at)
MAX_JOINTS = 50_000  # places where string literals meet, joined by one pass (without Python: cheaper)
SCREEN_SECONDS = 2.0  # wall time a node's passes may take together; past it the rest is not screened

# An escape, also written once more escaped (`\\x64` in a JSON string or a transcript of one).
_ESCAPE = re.compile(r"\\\\?(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3})")
_CHR = re.compile(r"chr\(\s{0,8}(0[xX][0-9a-fA-F]{1,6}|[0-9]{1,7})\s{0,8}\)")  # a literal first: found fast
# A shell assignment (not an option such as --depth=1) whose value holds no expansion, or a use of a
# variable: values never expand further, so substituting them cannot grow the text past one value per use.
_SHELL = re.compile(r"(?<![\w$.-])([A-Za-z_][A-Za-z0-9_]{0,63})=([^\s;&|<>()`$]{0,256})"
                    r"|\$(?:\{([A-Za-z_][A-Za-z0-9_]{0,63})\}|([A-Za-z_][A-Za-z0-9_]{0,63}))")
# Where two string literals meet ("dom" "ains", 'a' + 'b'): removing it joins them.
_ONE_JOINT = r"""["']\s{0,32}(?:\+\s{0,32})?["']"""
_JOINT = re.compile(f"{_ONE_JOINT}(?:{_ONE_JOINT}){{0,15}}")  # a quote first: positions without one are skipped fast
_QUOTES = str.maketrans("", "", "\"'")


class TooLarge(Exception):
    """A pass stopped at one of its caps or at its deadline: what it had not read is not screened."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Budget:
    """The work one pass may still do: `steps` matches, until `deadline` (time.monotonic)."""

    def __init__(self, deadline: float, steps: int = MAX_STEPS) -> None:
        self.deadline = deadline
        self.left = steps
        self.steps = steps
        self.joints = MAX_JOINTS

    @classmethod
    def starting_now(cls, seconds: float = SCREEN_SECONDS, steps: int = MAX_STEPS) -> Budget:
        return cls(time.monotonic() + seconds, steps)

    def fresh(self) -> Budget:
        """A budget for the next pass of the same node: its own steps, the same deadline."""
        return Budget(self.deadline, self.steps)

    def step(self, what: str = "matches") -> None:
        self.left -= 1
        if self.left < 0:
            raise TooLarge(f"over {self.steps:,} {what} in one pass")
        if not self.left % 64:  # the clock is read every 64 steps: a step is a few microseconds
            self.check()

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TooLarge("its screening ran past its deadline")


def plain(text: str, budget: Budget) -> str:
    """`text` with escapes decoded (`\\xNN`, `\\uNNNN`, `\\UNNNNNNNN`, octal; a JSON-escaped quote as
    the quote), `chr(N)` as the quoted character, and shell variables assigned in `text` itself
    substituted where they are used after it (`$D`, `${D}`). String literals are still apart: see `joined`."""
    text = _ESCAPE.sub(lambda found: _unescaped(found.group(), budget), text)
    text = text.replace('\\"', '"').replace("\\'", "'")
    text = _CHR.sub(lambda found: _character(found, budget), text)
    return _substituted(text, budget) if "$" in text else text


def joined(text: str, budget: Budget) -> str:
    """`text` with adjacent and added string literals joined into one (`"dom" "ains"` -> `"domains"`)."""
    text, count = _JOINT.subn("", text, count=budget.joints + 1)
    budget.joints -= count
    if budget.joints < 0:
        raise TooLarge(f"over {MAX_JOINTS:,} joined string literals in one pass")
    return text


def unquoted(text: str) -> str:
    """`text` without quotes, the way a shell reads `'dom'ains`, `$'dom'ains` or `"a""b"` as one word."""
    return text.replace("$'", "'").replace('$"', '"').translate(_QUOTES)


def _unescaped(escape: str, budget: Budget) -> str:
    budget.step("escapes")
    body = escape.lstrip("\\")
    code = int(body[1:], 16) if body[0] in "xuU" else int(body, 8)
    return chr(code) if code <= 0x10FFFF else escape


def _character(found: re.Match[str], budget: Budget) -> str:
    budget.step("chr() calls")
    if found.start() and (found.string[found.start() - 1].isalnum() or found.string[found.start() - 1] in "_."):
        return found.group()  # another function (unichr, x.chr)
    code = int(found.group(1), 0) if found.group(1)[1:2] in ("x", "X") else int(found.group(1))
    return f'"{chr(code)}"' if code <= 0x10FFFF else found.group()


def _substituted(text: str, budget: Budget) -> str:
    """`text` with each `$NAME` / `${NAME}` replaced by the value last assigned to NAME before it."""
    values: dict[str, str] = {}
    parts, done = [], 0
    for found in _SHELL.finditer(text):
        budget.step("shell words")
        if found.group(1):
            values[found.group(1)] = found.group(2).translate(_QUOTES)
        elif (value := values.get(found.group(3) or found.group(4))) is not None:
            parts += [text[done:found.start()], value]
            done = found.end()
    return "".join(parts) + text[done:]
