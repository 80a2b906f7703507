"""Reading files a user names (a config, a run's or a group's records) as bounded data.

A path on the command line may name anything: a fifo or a device (a plain read would block or
never end), a file of gigabytes, bytes that are not UTF-8, a YAML alias bomb (a few hundred
bytes whose aliases expand to billions of nodes when anything walks the result), YAML nested a
thousand levels deep (the composer recurses) or a tag for a Python object. Each is refused here
in one line (a UserError, or a ValueError for readers that name the file themselves), in
bounded time and memory: only a regular file, within a size limit, strict UTF-8, YAML without
anchors, aliases or tags beyond the safe ones, nested at most `MAX_DEPTH` levels.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
import yaml.composer

from services.errors import UserError
from services.fsutil import read_regular

MAX_CONFIG_BYTES = 2**20  # the bundled configs are a few KiB
MAX_VALUE_CHARS = 10_000  # one value on a command line: a model name, a number, a short list
MAX_DEPTH = 24  # a config nests 5 levels (loop.stages.DOMAIN.[stage].[value]); records a few more


def expand_user(path: str | Path) -> Path:
    """`path` with a leading ~ or ~user made that user's home; as it is when there is no such user or home (the
    path then names no file, which its reader says in one line)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # "Could not determine home directory"
        return Path(path)


def decode_utf8(data: bytes) -> str:
    """`data` as text; ValueError naming the first byte that is not UTF-8 and where it is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader without anchors and aliases (the expansion of an alias bomb is in what walks the
    result, so no bound on the parse can catch it) and with a bound on nesting."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:  # as PyYAML's stub says
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(None, None, "anchors and aliases (&name, *name) are not allowed "
                                              "in a config; write the value out", event.start_mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                  event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_yaml(path: Path, what: str = "config") -> dict:
    """A YAML mapping from a file a user named, or a UserError in one line (`what` names the file's role)."""
    try:
        text = decode_utf8(read_regular(path, MAX_CONFIG_BYTES, follow_links=True))
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UserError(f"{what} {path} is {e}") from None
    try:
        data = yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or (str(e).splitlines() or ["unreadable"])[0]
        raise UserError(f"{what} {path} is not valid YAML: {_one_line(problem)}{where}") from None
    except RecursionError:
        raise UserError(f"{what} {path} is not valid YAML: nested too deeply") from None
    return data or {}


def yaml_value(text: str) -> object:
    """One value written on a command line (`--set KEY=VALUE`): a YAML scalar, flow list or flow
    mapping, read with the same bounds as a file; ValueError in one line when it is not YAML."""
    if len(text) > MAX_VALUE_CHARS:
        raise ValueError(f"longer than {MAX_VALUE_CHARS} characters")
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as e:
        raise ValueError(f"not a YAML value: {_one_line(str(getattr(e, 'problem', None) or e))}") from None
    except RecursionError:
        raise ValueError("not a YAML value: nested too deeply") from None


def parse_json(data: bytes | str) -> object:
    """JSON as data; ValueError when it is not UTF-8, not JSON, or nested past what the parser
    can take (which would otherwise be a RecursionError)."""
    try:
        return json.loads(data if isinstance(data, str) else decode_utf8(data))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _one_line(text: str) -> str:
    """A parser's message as one printable line: it may quote the file's bytes."""
    text = " ".join(str(text).split())
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)[:300]
