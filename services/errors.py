"""Errors that end a command with one clear line and exit code 2; clean ends on Ctrl-C and SIGTERM."""

import signal
import sys


class UserError(Exception):
    """A problem with the user's input or environment, not a bug: printed as one line, exit 2."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every `finally` (sandboxes, gateway) still runs."""


def _raise_terminated(signum, frame):
    raise Terminated()


def exit_on_user_error(main):
    """Run `main()`; a UserError becomes one line on stderr and exit code 2, Ctrl-C exit 130,
    SIGTERM exit 143, each after the cleanup of whatever was open."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
    except (KeyboardInterrupt, Terminated) as e:
        print("interrupted: progress so far is saved; rerun with --resume_from to continue", file=sys.stderr)
        raise SystemExit(143 if isinstance(e, Terminated) else 130)
