"""GNU time, for the benches' peak memory of a child: it reports the peak RSS (%M, kB) of the command it runs,
and of all that command waited for, from its own wait4 of it. It is a small process, so the command inherits
no large peak at exec (as it would from a Python parent: ru_maxrss survives exec)."""

from __future__ import annotations

import os
import shutil
import subprocess


def gnu_time() -> str | None:
    """The path of a GNU time that works here (`-f %M -o FILE`), or None."""
    found = shutil.which("time")
    try:
        works = bool(found) and subprocess.run([found, "-q", "-f", "%M", "-o", os.devnull, "true"],
                                               capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        works = False
    return found if works else None
