"""HTML built so that text is escaped unless it is markup this package made.

Every string that reaches a page goes through `h` or `esc`: a plain `str` is escaped (agent
text, file names, error messages, anything read from a run), a `Markup` is trusted as it is.
Only this module and the pieces that call `h` make `Markup`; nothing read from disk becomes
one, so an agent's `<script>` is shown as text, never run.

Bidi control characters (Trojan Source: code that displays in another order than it runs) never
reach a page raw: in text each is written as a marked `<U+202E>` (class `bidi`), in an attribute
as the plain `<U+202E>`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from urllib.parse import quote, urlencode

from services.render import BIDI_PATTERN, bidi_visible

VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr"})


class Markup(str):
    """HTML made here: inserted as it is."""

    def __add__(self, other: object) -> Markup:
        return Markup(str.__add__(self, esc(other)))


def esc(value: object) -> Markup:
    """`value` as HTML text: markup as it is, anything else escaped (None is empty), each bidi
    control marked."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    return Markup(BIDI_PATTERN.sub(_bidi_mark, html.escape(str(value), quote=True)))


def _bidi_mark(found: re.Match[str]) -> str:
    return f'<span class="bidi" title="bidi control character">&lt;U+{ord(found.group()):04X}&gt;</span>'


def _attribute(value: object) -> Markup:
    """`value` as an attribute's value: escaped, each bidi control written as `<U+202E>`."""
    return value if isinstance(value, Markup) else Markup(html.escape(bidi_visible(str(value)), quote=True))


def join(parts: Iterable, sep: str = "") -> Markup:
    return Markup(sep.join(esc(p) for p in parts))


def h(name: str, attrs: dict | None = None, *children: object) -> Markup:
    """The element `name`; attribute values and children are escaped unless they are Markup.
    An attribute whose value is None or False is left out, True writes it bare."""
    parts = [name]
    for key, value in (attrs or {}).items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")  # class_ -> class, data_node -> data-node
        parts.append(key if value is True else f'{key}="{_attribute(value)}"')
    opening = f"<{' '.join(parts)}>"
    if name in VOID:
        return Markup(opening)
    return Markup(f"{opening}{join(children)}</{name}>")


def url(*segments: str, **query: object) -> str:
    """A link inside the dashboard: each path segment quoted (a name read from disk cannot add
    a segment, a scheme or a query), then the query."""
    path = "/" + "/".join(quote(str(s), safe="") for s in segments)
    query = {k: v for k, v in query.items() if v is not None}
    return path + (f"?{urlencode(query)}" if query else "")
