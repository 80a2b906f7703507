"""A command line's mistakes in one line: what was wrong, the flag probably meant, where the flags are listed.

argparse answers a mistyped flag with the whole usage (29 lines for run_optimization) and the error
last, with no guess. Every entry point builds its parser from `ArgumentParser` here instead, so the
same mistake reads `error: unrecognized argument --max_generations; did you mean --max_generation?
(python -m run_optimization --help lists every flag)`, one line, and exits with 2, as every other
mistake of a user does (`services.errors.exit_on_user_error`).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from services.render import console


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line; a subcommand's parser is one too (argparse makes
    it of its parent's class)."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        argv = sys.argv[1:] if args is None else list(args)
        options = sorted(set(option_strings(self)))
        # A mistyped flag is the cause of what goes wrong after it (a required flag missing, a stray value):
        # it is what an error names.
        self._unknown = [word for word in long_flags(argv) if not any(o.startswith(word) for o in options)]
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            self.error(unrecognized(extras, options))
        return parsed

    def error(self, message: str) -> NoReturn:
        if unknown := getattr(self, "_unknown", None):
            message = unrecognized(unknown, sorted(set(option_strings(self))))
        self.exit(2, f"error: {console(message)} ({self.prog} --help lists every flag)\n")


def option_strings(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every flag `parser` takes, its subcommands' included (argparse reports their unknown flags at the top)."""
    for action in parser._actions:
        yield from action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from option_strings(sub)


def long_flags(argv: list[str]) -> Iterator[str]:
    """The long flags of a command line, without their `=VALUE`; none after `--`."""
    for word in argv:
        if word == "--":
            return
        if word.startswith("--"):
            yield word.split("=", 1)[0]


def _is_flag(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False  # a negative number: a value, not a flag


def unrecognized(extras: list[str], options: list[str]) -> str:
    """The message for what a parser did not take: the unknown flags (else the stray values), and for each
    flag the closest one it takes."""
    flags = [word.split("=", 1)[0] for word in extras if _is_flag(word)]
    named = flags or extras
    text = f"unrecognized argument{'s' if len(named) > 1 else ''} {', '.join(named)}"
    guesses = {flag: close[0] for flag in flags if (close := difflib.get_close_matches(flag, options, n=1))}
    if len(guesses) == 1 and len(flags) == 1:
        text += f"; did you mean {next(iter(guesses.values()))}?"
    elif guesses:
        text += "; did you mean " + ", ".join(f"{meant} for {flag}" for flag, meant in guesses.items()) + "?"
    return text
