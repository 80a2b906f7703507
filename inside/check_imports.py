"""Import a built `proofgrader` package with the project's own agent code out of reach.

    python -I -B check_imports.py PACKAGE_ROOT

Run by setup_proofgrader_repo in a sandbox, in a fresh interpreter: the package is evolved
code, and importing it runs that code. An import of `agent` or `task_agent` (the project's,
not the package's copies under `proofgrader.`) fails with an ImportError naming it, so a
package that would not work once installed on its own is refused. Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys

OUTSIDE = ("agent", "task_agent")  # moved under proofgrader. in the package; the bare names are the project's


class _Outside(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in OUTSIDE:
            raise ImportError(f"it imports {name}, which is outside the proofgrader package")
        return None


def main(argv: list[str]) -> None:
    sys.meta_path.insert(0, _Outside())
    sys.path.insert(0, argv[1])
    importlib.import_module("proofgrader.task_agent").TaskAgent  # noqa: B018 - the lookup is the check: it raises if the class is missing


if __name__ == "__main__":
    main(sys.argv)
