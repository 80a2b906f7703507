"""The `none` backend: agent code as a plain subprocess of the user. Only when asked for.

No isolation at all: the code runs with the user's files and network. It exists for
debugging and for machines with neither Docker nor bubblewrap, and `open_sandbox`
warns every time it is used. The environment is still exactly the one given, so
provider keys stay out.
"""

from __future__ import annotations

from services.sandbox.base import Sandbox
from services.sandbox.processes import GroupPopen


class LocalSandbox(Sandbox):
    name = "none"
    isolated = False

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> GroupPopen:
        return GroupPopen(argv, env=env, cwd=cwd)
