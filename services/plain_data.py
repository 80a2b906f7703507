"""Plain data (what YAML and JSON read into) checked against type annotations, and shown in one line.

The config (services/config.py) and the run's records (archive/records.py) are checked with these:
a value read from a file is trusted only in the shape its annotation names.
"""

from __future__ import annotations

import reprlib
import types
import typing


def conforms(value: object, hint: object) -> bool:
    """Whether a value read from YAML or JSON has the annotated type: int, float (ints too, never bools),
    bool, str, X | None, dict / list with or without item types."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint in (bool, int, str):
        return type(value) is hint  # type, not isinstance: True is an int to Python, not to a config
    if hint is float:
        return type(value) in (int, float)
    if (origin or hint) is dict:
        return isinstance(value, dict) and all(conforms(k, args[0]) and conforms(v, args[1])
                                               for k, v in value.items() if args)
    if (origin or hint) is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value if args)
    kind = origin or hint
    if not isinstance(kind, type):  # what isinstance itself would say of it
        raise TypeError(f"conforms cannot check a value against {hint!r}")
    return isinstance(value, kind)


def describe(hint: object) -> str:
    """An annotation in words, for error messages."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in typing.get_args(hint))
    words = {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string",
             dict: "a mapping", list: "a list"}
    return words.get(hint) or f"of the form {hint}"


_LONG_INT_BITS = 200  # an integer past this (about 60 digits) is shown by its size


class _Short(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        """An integer too long to show is named by its number of digits: past 4,300 of them Python
        refuses to write one in decimal (a ValueError), and nobody reads 60."""
        if x.bit_length() > _LONG_INT_BITS:
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


_SHORT = _Short()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60


def show(value: object) -> str:
    """A value as the one line of an error message: its repr, cut short."""
    text = _SHORT.repr(value)  # reprlib: a value of a billion items is cut before it is made
    return text if len(text) <= 60 else text[:57] + "..."
