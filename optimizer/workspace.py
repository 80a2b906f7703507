"""What agent code is, as files: the evolvable paths a workspace holds.

A workspace is the folder a sandbox sees: the agent's code and nothing of the
trusted core (no data sets, no labels, no gateway). The loop makes one per node
as a git worktree; a standalone harness run copies these paths from the project.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# Everything the meta agent may edit; the rest of the project is trusted core.
EVOLVABLE_PATHS = ("agent", "task_agent", "meta_agent", "select_next_parent.py", "ensemble.py")
_NOT_CODE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def copy_evolvable(src_root: str | Path, dst: str | Path) -> Path:
    """Copy the evolvable paths that exist under `src_root` into `dst` (created)."""
    src_root, dst = Path(src_root), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in EVOLVABLE_PATHS:
        src = src_root / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=_NOT_CODE, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dst / name)
    return dst
