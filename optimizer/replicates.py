"""K runs of one configuration with K seeds, into one folder (`--replicates K`).

The paper reports each configuration over 5 runs: one run is one draw of a noisy search.
A group folder holds `group.json` (its runs, their seeds and the command they share) and
one run folder per seed, `seed-<s>/`, each an ordinary run: resumable on its own, and
together with `--resume_from GROUP`, readable by `python -m apps.analyze GROUP`.

Each replicate is a `run_optimization` process of its own, so one that fails or is
killed leaves the others alone; `at_once` of them run together (with `--executor ray`
their sandboxes share the cluster). Each replicate has the whole `--budget_usd`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from archive.experiments import GROUP, GROUP_SCHEMA
from services.config import PROJECT_ROOT
from services.errors import UserError
from services.fsutil import atomic_write_json

# Flags each replicate gets its own value of, or that belong to the group's command alone.
GROUP_FLAGS = ("replicates", "replicates_at_once", "run_id", "output_dir", "seed", "resume_from", "dashboard")


def replicate_argv(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The command line every replicate shares: the flags given, minus the group's own."""
    argv = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or action.dest in GROUP_FLAGS or value is None or value is False:  # 0 is a value
            continue
        flag = action.option_strings[-1]
        if value is True:
            argv.append(flag)
        elif isinstance(value, list) and action.nargs is None:  # an append flag (--data): once per value
            argv += [x for v in value for x in (flag, str(v))]
        elif isinstance(value, list):  # nargs "+" (--domain)
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def start_group(group_dir: Path, argv: list[str], replicates: int, first_seed: int) -> dict:
    if (group_dir / GROUP).exists() or (group_dir / "run.json").exists():
        raise UserError(f"{group_dir} already holds a run: pass --resume_from {group_dir}, or another --run_id")
    seeds = list(range(first_seed, first_seed + replicates))
    group = {"schema_version": GROUP_SCHEMA, "runs": [f"seed-{s}" for s in seeds], "seeds": seeds, "argv": argv}
    group_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(group_dir / GROUP, group)
    return group


def run_group(group_dir: Path, group: dict, at_once: int, resuming: Sequence[str] = ()) -> dict[str, int]:
    """Run (or resume) every replicate, `at_once` together; the exit code of each that failed, by name. Each
    runs with `resuming`, the flags of the command that resumes the group, last (so they win): a folder's own
    choices of where code runs and data goes are the command line's to accept or change (archive/run_folder.py)."""
    commands = []
    for name, seed in zip(group["runs"], group["seeds"]):
        run_dir = group_dir / name
        if (run_dir / "run.json").exists():
            commands.append((name, ["--resume_from", str(run_dir), *resuming]))
        else:
            commands.append((name, [*group["argv"], *resuming, "--output_dir", str(group_dir), "--run_id", name,
                                    "--seed", str(seed)]))
    failed: dict[str, int] = {}
    lock = threading.Lock()
    pending = list(commands)

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                name, argv = pending.pop(0)
            if (code := _replicate(name, argv)) != 0:
                with lock:
                    failed[name] = code

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(at_once, len(commands))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in failed:
        print(f"[{name}] failed; continue it with --resume_from {group_dir}", flush=True)
    return failed


def _replicate(name: str, argv: list[str]) -> int:
    """One replicate's process, in this command's folder, so that a relative path of the command line (--config,
    --set loop.domains=[...]) is the file this command checked; its lines printed with its name in front, its
    progress bars off."""
    path = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.Popen([sys.executable, "-m", "run_optimization", *argv], cwd=os.getcwd(),
                            env={**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": path}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in proc.stdout or ():
        print(f"[{name}] {line.rstrip()}", flush=True)
    return proc.wait()
