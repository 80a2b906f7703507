"""Agent text made safe for where it is shown: one function per medium.

Agent text (file names, stderr, error messages, predictions, patches) reaches a terminal, a
spreadsheet and a browser. Each is a medium with its own control language: escape sequences
and bidi controls on a terminal (a window title, a clipboard write through OSC 52, a cleared
screen, a line that reads differently from its bytes), formulas in a spreadsheet cell, bidi
controls in a browser. Whatever the core shows goes through the function of its medium here:

- `console`: every character a terminal could act on (C0 and C1 controls, DEL, bidi and other
  format characters, lone surrogates, unassigned and private code points, line and paragraph
  separators) written visibly, and the text bounded;
- `name`: a name (a file an agent made) as escaped text that any record can hold (no lone
  surrogate, no control), the same for every run;
- `csv_cell` / `csv_value`: a CSV cell that a spreadsheet shows as text, never runs as a
  formula, and its exact inverse for the project's own readers;
- `BIDI_PATTERN`, `bidi_visible`, `bidi_files`: where bidi controls are, for the dashboard to
  mark them (its HTML escaping stays `apps.dashboard.markup`'s) and the capture to flag them.
"""

from __future__ import annotations

import re
from typing import TypeVar

# Unicode's bidi formatting characters (UAX #9): embeddings, overrides, isolates and marks.
# A diff or a line holding them can display in an order other than the one it runs in.
BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
BIDI_PATTERN = re.compile("[" + "".join(sorted(BIDI)) + "]")
CONSOLE_LIMIT = 2000  # characters of one console line: a line is read, not scrolled through
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(ch: str) -> str | None:
    """How `ch` is written when a terminal could act on it; None when it is shown as it is."""
    code = ord(ch)
    if ch.isprintable() and ch not in BIDI:
        return None
    if ch in _NAMED:
        return _NAMED[ch]
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as Python's surrogateescape keeps it
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF or 0x80 <= code <= 0x9F:
        return f"\\u{code:04x}"
    return f"<U+{code:04X}>"


def _escaped(text: str) -> str:
    return "".join(_visible(ch) or ch for ch in text)


def console(text: object, limit: int = CONSOLE_LIMIT) -> str:
    """`text` as one terminal line: every control, bidi, separator or non-printable character
    written visibly (`\\x1b`, `\\n`, `<U+202E>`, a byte that was not UTF-8 as `\\xff`), cut to
    `limit` characters with a note of how many more there were."""
    text = str(text)
    kept = _escaped_prefix(text, limit)
    more = len(text) - len(kept)
    return _escaped(kept) + (f" ... ({more} more characters)" if more else "")


def _escaped_prefix(text: str, limit: int) -> str:
    """The longest start of `text` whose escaped form fits in `limit` characters."""
    size = 0
    for i, ch in enumerate(text):
        size += len(_visible(ch) or ch)
        if size > limit:
            return text[:i]
    return text


def name(text: str) -> str:
    """A name an agent made (a file, read from a workspace) as text every record can hold and every
    reader sees alike: backslashes doubled, then each character `console` would escape escaped,
    so that two names stay two and none has a control or a lone surrogate. Unbounded: a name is a key."""
    text = text.replace("\\", "\\\\")
    return _escaped(text)


# What makes a spreadsheet (Excel, LibreOffice, Google Sheets) read a cell as a formula: its first
# character, after any leading quote of ours (so that the marking is undone exactly), and the
# full-width forms some of them take for the ASCII ones. Tab and CR start a formula in some.
_FORMULA_START = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")
_Cell = TypeVar("_Cell")  # a cell of any type: only strings are changed


def csv_cell(value: _Cell) -> _Cell | str:
    """`value` as a CSV cell a spreadsheet shows as text: a string that would start a formula
    (`=`, `+`, `-`, `@`, tab, CR, LF, their full-width forms, also after leading spaces or quotes)
    gets a leading `'`. Anything else, and every non-string, is returned as it is. `csv_value`
    undoes it exactly."""
    if isinstance(value, str) and _needs_quote(value):
        return "'" + value
    return value


def csv_value(cell: _Cell) -> _Cell | str:
    """The text `csv_cell` was given: one leading `'` removed where `csv_cell` added it."""
    if isinstance(cell, str) and cell.startswith("'") and _needs_quote(cell[1:]):
        return cell[1:]
    return cell


def _needs_quote(text: str) -> bool:
    rest = text.lstrip("'").lstrip(" ")
    return bool(rest) and rest[0] in _FORMULA_START


_BIDI_SHOWN = {ord(ch): f"<U+{ord(ch):04X}>" for ch in BIDI}
MAX_BIDI_LINES = 10_000  # lines with a bidi control looked at, one by one (1 ms a hundred)
BIDI_UNREAD = "(more files: past 10,000 lines with bidi controls)"  # named in place of the files past them


def bidi_visible(text: str) -> str:
    """`text` with each bidi control written as `<U+202E>` (a page marks them: apps.dashboard.markup)."""
    return text.translate(_BIDI_SHOWN) if BIDI_PATTERN.search(text) else text


def bidi_files(patch: str) -> list[str]:
    """The files of a unified diff whose added lines hold a bidi control (the Trojan Source pattern).
    Only the lines holding one are visited, in one pass, at most MAX_BIDI_LINES of them; when more
    follow, the list ends with BIDI_UNREAD."""
    patch = "\n" + patch  # every line, the first too, starts after a newline
    found: dict[str, None] = {}
    current, pos, header = "?", 1, patch.find("\n+++ ")
    for _ in range(MAX_BIDI_LINES):
        hit = BIDI_PATTERN.search(patch, pos)
        if hit is None:
            return list(found)
        while header != -1 and header < hit.start():  # the files passed on the way: the last is the hit's
            current = _new_name(patch[header + 1:patch.find("\n", header + 1) % (len(patch) + 1)])
            header = patch.find("\n+++ ", header + 1)
        line = patch.rfind("\n", pos - 1, hit.start()) + 1
        if patch.startswith("+", line) and not patch.startswith("+++ ", line):
            found[current] = None
        pos = patch.find("\n", hit.start()) + 1
        if pos == 0:
            return list(found)
    return list(found) + ([BIDI_UNREAD] if BIDI_PATTERN.search(patch, pos) else [])


def _new_name(header: str) -> str:
    """The file of a `+++ ` line."""
    return header[6:] if header.startswith("+++ b/") else header[4:]
