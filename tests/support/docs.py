"""Sections of the documentation (README.md and the site's pages in docs/), for the tests that run or
check what a page says: a page's commands, examples and numbers are tested where they are written."""

from __future__ import annotations

import re
from pathlib import Path

from support.cli import REPO_ROOT

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each heading outside fenced code (a shell comment is no heading)."""
    found, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := _HEADING.match(line)):
            found.append((i, len(m.group(1)), m.group(2)))
    return found


def section(path: Path, title: str) -> str:
    """The text under the heading `title` of the page at `path` (any level), up to the next heading of
    the same or a higher level; ValueError when the page has no such heading."""
    text = path.read_text(encoding="utf-8")
    lines, marks = text.splitlines(), headings(text)
    for n, (i, level, name) in enumerate(marks):
        if name == title:
            end = next((j for j, lv, _ in marks[n + 1:] if lv <= level), len(lines))
            return "\n".join(lines[i + 1:end]) + "\n"
    raise ValueError(f"{path.name} has no heading {title!r}")
