"""Values given on a command line: `--set SECTION.KEY=VALUE` config fields (a strategy's own settings as
`--set search.STRATEGY.SETTING=VALUE`), `--data DOMAIN=PATH`
data files, and argparse types of numbers with a lower bound. Each bad value is one line naming its
flag (a UserError), or argparse's usage line (exit 2)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable

from services.config import Config, apply_mapping
from services.errors import UserError
from services.user_files import MAX_VALUE_CHARS, expand_user, yaml_value

MAX_DIGITS = 100  # no setting needs a number this long; past 4,300 digits Python will not even read one
LONG_NUMBER = re.compile(rf"[0-9_]{{{MAX_DIGITS + 1}}}")


def apply_settings(config: Config, settings: Iterable[str | tuple[str, object]] | None, flag: str = "--set") -> Config:
    """Config fields set one by one, in order: `SECTION.KEY=VALUE` texts (`--set`, VALUE read as YAML:
    `8`, `null`, `[a, b]`, `{model: [1, 2]}`) or (SECTION.KEY, value) pairs (the API's). Each is
    checked as a file's key would be, and an error names `--set KEY`."""
    for item in settings or []:
        if isinstance(item, str):
            key, sep, text = item.partition("=")
            if not sep:
                raise UserError(f"{flag} {item[:60]}: expected SECTION.KEY=VALUE, "
                                "e.g. --set loop.promotion=not_worse_than_parent")
            # Before YAML makes an int of it (Python's int() has a digit limit); a longer text is refused as such.
            if len(text) <= MAX_VALUE_CHARS and LONG_NUMBER.search(text):
                raise UserError(f"{flag} {key.strip()[:60]}: a number of more than {MAX_DIGITS} digits; no "
                                "setting takes one")
            try:
                value = yaml_value(text)
            except ValueError as e:
                raise UserError(f"{flag} {key.strip()[:60]}: {e}") from None
        else:
            key, value = item
        key = key.strip()
        section, _, name = key.partition(".")
        strategy, dot, setting = name.partition(".") if section == "search" else (name, "", "")
        if not section or not name or "." in setting or (dot and not (strategy and setting)) \
                or (section != "search" and "." in name):
            raise UserError(f"{flag} {key[:60]}: expected SECTION.KEY (or search.STRATEGY.SETTING), "
                            "e.g. loop.promotion")
        given = {strategy: {setting: value}} if setting else {name: value}
        apply_mapping(config, {section: given}, f"{flag} {key[:60]}")
    return config


def parse_data_flags(values: list[str] | None) -> dict[str, str]:
    """`--data DOMAIN=PATH` flags as {domain: absolute path}."""
    files = {}
    for value in values or []:
        domain, sep, path = value.partition("=")
        if not sep or not domain or not path:
            raise UserError(f"--data {value}: expected DOMAIN=PATH, e.g. --data amo_bench=AMO-Bench.jsonl")
        files[domain] = str(expand_user(path).resolve())
    return files


def int_flag(low: int, also: int | None = None) -> Callable[[str], int]:
    """An argparse `type=`: an integer of at least `low`, or `also` (e.g. -1 = all); else usage and exit 2."""
    def parse(text: str) -> int:
        if len(text) > MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"expected an integer, got {len(text)} characters")
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low and value != also:
            either = "" if also is None else f"{also} or "
            raise argparse.ArgumentTypeError(f"must be {either}{low} or more, got {value}")
        return value
    return parse


def number_flag(low: float) -> Callable[[str], float]:
    """An argparse `type=`: a finite number of at least `low`; else usage and exit 2."""
    def parse(text: str) -> float:
        if len(text) > MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"expected a number, got {len(text)} characters")
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a number, {low:g} or more, got {text!r}")
        return value
    return parse
