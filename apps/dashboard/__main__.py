"""Serve the dashboard of the runs in a folder (or of one run): python -m apps.dashboard [outputs/ | outputs/RUN]

Read-only: it never writes to a run, and reads a run while its loop writes it.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from services.cli_parser import ArgumentParser
from services.errors import Terminated, UserError, exit_on_user_error
from services.render import console

if TYPE_CHECKING:
    from apps.dashboard.server import Server


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m apps.dashboard", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("path", nargs="?", default="outputs", help="a folder of runs, or one run (default: outputs)")
    ap.add_argument("--port", type=int, default=8765, help="port to listen on (0: any free port; default 8765)")
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1, this machine only; anyone who reaches "
                         "another address can read the runs)")
    ap.add_argument("--exit_with", type=int, default=None, help=argparse.SUPPRESS)  # a run's pid: stop when it ends
    return ap


def stop_when_gone(server: Server, pid: int) -> None:
    """Shut the server down once process `pid` (the run that started it) has ended."""
    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                server.shutdown()
                return
            except PermissionError:
                pass

    threading.Thread(target=watch, name="exit-with", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    from apps.dashboard.server import serve, url_of

    args = build_parser().parse_args(argv)
    root = Path(args.path)
    if not root.is_dir():
        raise UserError(f"{root} is not a folder of runs or a run")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0 to 65535, got {args.port}")
    try:
        server = serve(root.resolve(), args.host, args.port)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UserError(f"port {args.port} is in use: pass --port N (0: any free port)") from None
        raise UserError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    try:  # from here on, Ctrl-C (or SIGTERM) is the way to stop it: nothing to save, nothing to say
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(console(f"warning: listening on {args.host}: whoever reaches it can read these runs"),
                  file=sys.stderr)
        print(console(f"dashboard: {url_of(server)} (Ctrl-C stops it)"), flush=True)
        if args.exit_with is not None:
            stop_when_gone(server, args.exit_with)
        server.serve_forever(poll_interval=0.25)
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    exit_on_user_error(main)
