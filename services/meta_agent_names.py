"""The names `--meta_agent` takes, listed without importing any agent: the config's validation and the
command line's --help read them here, below services/coding_agents/, which loads them.

`builtin` and `paper` are agent code in the workspace (run by inside/run_meta.py); the others are
command-line coding agents: the bundled ones (services/coding_agents/, a file each) and those that installed
plug-ins name in the entry point group `hyperagents_imo.meta_agents`.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.metadata import EntryPoint, distributions

BUILTIN, PAPER = "builtin", "paper"
IN_WORKSPACE = (BUILTIN, PAPER)  # meta agents that are the workspace's own code
BUNDLED = {"claude-code": "claude_code", "codex": "codex", "mini-swe-agent": "mini_swe_agent"}  # name -> module
GROUP = "hyperagents_imo.meta_agents"
NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")  # a plug-in's name (others are not listed)


def meta_agent_names() -> tuple[str, ...]:
    """Every name `--meta_agent` takes: the workspace's own, the bundled coding agents, the plug-ins'."""
    plugins = [p.name for p in plugin_points() if p.name not in (*IN_WORKSPACE, *BUNDLED)]
    return (*IN_WORKSPACE, *BUNDLED, *dict.fromkeys(plugins))


def is_coding_agent(name: str) -> bool:
    """Whether meta agent `name` is a command-line coding agent rather than the workspace's code."""
    return name not in IN_WORKSPACE


@cache
def plugin_points() -> tuple[EntryPoint, ...]:
    """The entry points of GROUP, unloaded, whose names are shaped like one (NAME)."""
    found = []
    for dist in distributions():  # in the order of sys.path: the first of one name is the one loaded
        try:
            found += [p for p in dist.entry_points if p.group == GROUP and NAME.fullmatch(p.name)]
        except Exception:  # a package whose metadata does not parse adds none
            continue
    return tuple(found)
