"""Containers that a killed run left behind, found by their labels and removed.

A run killed with -9 cannot remove its containers: an evaluation container keeps running
(its relay serving the dead run's socket folder, its workspace mounted) until someone removes
it. Every container we create carries labels naming the process that made it, and the next
run (and `python -m services.sandbox check`) removes those whose maker is gone, as it does
pids cgroups (bwrap.py) and gateway socket folders (services/gateway/server.py).

"Gone" is decided carefully, since a mistake kills someone's live sandbox. Only a container
with all our labels is considered (one made before them, or by another tool, is kept); only one
made by this user; only one made in this pid namespace (a maker inside another container has
pids we cannot see). Made in this boot: its maker is gone when no process has its pid, or the
process that has it started at another time (the pid was reused). Made in another boot: it is
removed only when it no longer runs (the engine restarted with the machine); a running one may
belong to another machine sharing the engine, and is kept.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

LABEL = "hyperagents.sandbox"  # the pid of the process that made the container
LABEL_START = "hyperagents.sandbox.start"  # when that process started, in clock ticks after boot
LABEL_BOOT = "hyperagents.sandbox.boot"  # the kernel's boot id then
LABEL_PIDNS = "hyperagents.sandbox.pidns"  # the pid namespace its pid is in
LABEL_UID = "hyperagents.sandbox.uid"  # the user it ran as


def process_start(pid: int | str) -> str | None:
    """When process `pid` started (field 22 of /proc/PID/stat), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]  # after the name, which may hold spaces and ")"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def creator_labels() -> dict[str, str]:
    """The labels that say who made a container: this process."""
    return {LABEL: str(os.getpid()), LABEL_START: process_start("self") or "", LABEL_BOOT: _boot_id(),
            LABEL_PIDNS: _pid_namespace(), LABEL_UID: str(os.getuid())}


def creator_gone(labels: dict[str, str], running: bool) -> bool:
    """Whether the process that made a container with these labels is surely gone (see the module's doc)."""
    pid, start = labels.get(LABEL, ""), labels.get(LABEL_START, "")
    if not (pid.isdigit() and start.isdigit() and labels.get(LABEL_BOOT)):
        return False
    if labels.get(LABEL_UID) != str(os.getuid()) or labels.get(LABEL_PIDNS) != _pid_namespace():
        return False
    if labels[LABEL_BOOT] != _boot_id():
        return not running
    return process_start(pid) != start


def remove_dead_containers(client: docker.DockerClient) -> list[str]:
    """Remove the containers whose maker is gone; their names. Errors are the engine's: a container
    removed meanwhile is skipped."""
    import docker
    import docker.errors

    removed = []
    for container in client.api.containers(all=True, filters={"label": LABEL}):
        labels = container.get("Labels") or {}
        if not creator_gone(labels, container.get("State") == "running"):
            continue
        try:
            client.api.remove_container(container["Id"], force=True)
        except docker.errors.NotFound:
            continue
        name = (container.get("Names") or [container["Id"][:12]])[0].lstrip("/")
        removed.append(name)
        print(f"removed the sandbox container {name}: the process that made it (pid {labels[LABEL]}) is gone "
              "(a killed run)", file=sys.stderr)
    return removed
