"""Errors that end a command with one clear line and exit code 2."""

import sys


class UserError(Exception):
    """A problem with the user's input or environment, not a bug: printed as one line, exit 2."""


def exit_on_user_error(main):
    """Run `main()`; a UserError becomes one line on stderr and exit code 2, Ctrl-C exit 130."""
    try:
        return main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
    except KeyboardInterrupt:
        print("interrupted: progress so far is saved; rerun with --resume_from to continue", file=sys.stderr)
        raise SystemExit(130)
