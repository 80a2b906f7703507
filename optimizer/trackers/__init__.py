"""Experiment trackers: the run as MLflow, Weights & Biases or TensorBoard show it, alongside its own
records (`tracking.backends`, `--track`).

`Trackers` is one subscriber of the loop's events; the loop knows nothing of it. At `RunStarted`
each backend opens (or reopens) its run and logs what it has not logged yet: the config and
run.json once, then every recorded node it lacks, so a resumed run continues the same tracker run
and a node is logged once. At each `NodeFinished` it logs the node and, when the run's best node
changed, the new best. At `RunEnded` it closes.

What each backend has logged is kept in RUN/tracking/<backend>.json (its run id, the nodes by
their record's time: a node reopened and redone is a new record), written after each step, so a
run killed between a node's record and its logging logs it on resume. A tracker is never worth a
run: a backend that fails (a full disk, the library's error) is a warning event and logs nothing
more in this process; the next resume catches it up."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from archive.records import Node
from archive.run_folder import read_run_record
from optimizer.events import Event, Events, NodeFinished, RunEnded, RunStarted, Warned
from optimizer.trackers.content import best_metrics, cut, node_metrics, node_record
from services.config import Config, TrackingConfig
from services.errors import UserError
from services.fsutil import atomic_write_json, read_below, read_bounded
from services.user_files import parse_json

if TYPE_CHECKING:
    from archive.store import Archive

STATE_LIMIT = 16 * 2**20  # RUN/tracking/<backend>.json: a run id and a line per node
MAX_ENTRIES = 200_000  # files and folders of RUN/tracking looked at for links before a tracker writes there
# Each tracker's store under RUN/tracking, and whether its library writes anywhere in it: W&B makes a new
# offline-run folder each time (whose logs it links to its own cache), the others write into what is there.
STORES = {"mlflow": ("mlruns", True), "tensorboard": ("tensorboard", True), "wandb": ("wandb", False)}
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a tracker's run id as MLflow and W&B make them


@dataclass(frozen=True)
class Backend:
    """A tracker the run can log to: the library its pip extra (of the backend's name) installs, and
    its Tracker class as "module:Class", imported only when chosen (each library is slow to import)."""

    library: str
    tracker: str

    def load(self) -> Callable[[Path, TrackingConfig], Tracker]:
        module, _, name = self.tracker.partition(":")
        return getattr(importlib.import_module(module), name)


# The names services.config_values.TRACKERS lets a run choose (tests/test_trackers.py
# keeps the two equal).
BACKENDS = {
    "mlflow": Backend("mlflow", "optimizer.trackers.mlflow_tracker:MlflowTracker"),
    "wandb": Backend("wandb", "optimizer.trackers.wandb_tracker:WandbTracker"),
    "tensorboard": Backend("tensorboardX", "optimizer.trackers.tensorboard_tracker:TensorboardTracker"),
}


def require(backends: list[str]) -> None:
    """Refuse, before the run starts, a tracker whose library is not installed, naming the pip command."""
    missing = [b for b in backends if importlib.util.find_spec(BACKENDS[b].library) is None]
    if missing:
        raise UserError(f"--track {','.join(missing)}: {', '.join(BACKENDS[b].library for b in missing)} not "
                        f"installed; pip install -e \".[{','.join(missing)}]\"")


class Tracker(Protocol):
    """What a backend does for the run: open (or reopen) its run, log a node, mark the best, close."""

    name: str

    def start(self, kept: dict, run_record: dict) -> dict: ...
    def node(self, step: int, node_id: str, metrics: dict[str, float], record: dict, patch: str) -> None: ...
    def best(self, step: int, node_id: str, metrics: dict[str, float]) -> None: ...
    def finish(self, ended: str) -> None: ...


@dataclass
class _Open:
    """A backend logging this run, and what it has logged."""

    tracker: Tracker
    state_path: Path
    kept: dict = field(default_factory=dict)  # the backend's own ids (run id, URI)
    logged: dict[str, str] = field(default_factory=dict)  # node id -> created_at of the record logged
    best: str | None = None

    def save(self) -> None:
        atomic_write_json(self.state_path, {"kept": self.kept, "logged": self.logged, "best": self.best})


class Trackers:
    """The subscriber that logs the run to each of `tracking.backends` (nothing when there are none)."""

    def __init__(self, run_dir: Path, config: Config, archive: Archive, best: Callable[[], Node | None],
                 events: Events) -> None:
        self.run_dir, self.settings, self.archive = Path(run_dir), config.tracking, archive
        self.best_node, self.events = best, events
        self.open: list[_Open] = []

    def __call__(self, event: Event) -> None:
        if not self.settings.backends:
            return
        if isinstance(event, RunStarted):
            for name in self.settings.backends:
                self._start(name)
        elif isinstance(event, NodeFinished):
            for backend in list(self.open):
                self._guard(backend, "logging node " + event.node.node_id, lambda b=backend: self._node(b, event.node))
        elif isinstance(event, RunEnded):
            for backend in list(self.open):
                self._guard(backend, "closing", lambda b=backend: b.tracker.finish(event.state))
            self.open.clear()

    def _start(self, name: str) -> None:
        folder = self.run_dir / "tracking"
        try:
            store, deep = STORES[name]
            if planted := planted_entry(folder, deep=False) or planted_entry(folder / store, deep):
                raise OSError(f"{planted} is a link or a special file (a tracker's library would write through it)")
            folder.mkdir(exist_ok=True)
            backend = _Open(BACKENDS[name].load()(self.run_dir, self.settings), folder / f"{name}.json")
            backend.kept, backend.logged, backend.best = self._read(backend.state_path)
            backend.kept = backend.tracker.start(backend.kept, read_run_record(self.run_dir).to_dict())
            backend.save()
        except Exception as e:
            self.events.emit(Warned(f"tracker {name} not started: {type(e).__name__}: {cut(str(e), 300)}"))
            return
        self.open.append(backend)
        self._guard(backend, "catching up", lambda: self._catch_up(backend))

    def _read(self, path: Path) -> tuple[dict, dict, str | None]:
        """What a backend logged in earlier processes of this run; nothing for a new one."""
        if not path.exists():
            return {}, {}, None
        try:
            state = parse_json(read_bounded(path, STATE_LIMIT))
            if not isinstance(state, dict):
                raise TypeError("not an object")
            kept, logged, best = state["kept"], state["logged"], state["best"]
            if isinstance(kept, dict) and isinstance(logged, dict) and (best is None or isinstance(best, str)) \
                    and all(isinstance(v, (str, bool)) and len(str(v)) <= 4096 for v in kept.values()) \
                    and RUN_ID.fullmatch(str(kept.get("run_id", "-"))):
                return kept, logged, best
        except (OSError, ValueError, KeyError, TypeError):
            pass
        self.events.emit(Warned(f"{path} is garbled: its tracker starts a new run"))
        return {}, {}, None

    def _catch_up(self, backend: _Open) -> None:
        """The nodes recorded while this backend was not logging (earlier processes, a failure), and
        the best node once after them (the best, asked after each node, would cost O(n^2))."""
        missing = [n for n in self.archive.ordered() if backend.logged.get(n.node_id) != n.created_at]
        for node in missing:
            self._node(backend, node, best=False)
        if missing:
            self._best(backend, max(n.generation for n in missing))
            backend.save()

    def _node(self, backend: _Open, node: Node, best: bool = True) -> None:
        if backend.logged.get(node.node_id) == node.created_at:
            return
        limit = self.settings.text_kb * 1024
        backend.tracker.node(node.generation, node.node_id, node_metrics(node), node_record(node),
                             self._patch(node.node_id, limit))
        backend.logged[node.node_id] = node.created_at
        if best:
            self._best(backend, node.generation)
        backend.save()

    def _best(self, backend: _Open, step: int) -> None:
        best = self.best_node()
        if best is not None and best.node_id != backend.best:
            backend.tracker.best(step, best.node_id, best_metrics(best))
            backend.best = best.node_id

    def _patch(self, node_id: str, limit: int) -> str:
        """The node's patch.diff, its first `limit` bytes (the agent wrote it)."""
        try:
            data, more = read_below(self.run_dir / "nodes", f"{node_id}/patch.diff", limit)
        except FileNotFoundError:
            return ""  # the initial node, and a node whose meta agent left no change
        text = data.decode("utf-8", "replace")
        return text + (f"\n[... cut at {limit} bytes for the tracker; the whole patch is in nodes/{node_id}/]"
                       if more else "")

    def _guard(self, backend: _Open, what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as e:
            name = backend.tracker.name
            self.open.remove(backend)
            self.events.emit(Warned(f"tracker {name}: {what} failed ({type(e).__name__}: {cut(str(e), 300)}); it "
                                    "logs nothing more in this process, and a resume catches it up"))


def planted_entry(folder: Path, deep: bool = True) -> Path | None:
    """The first link out of `folder`, fifo, socket or device in it (below it with `deep`), or `folder`
    itself when it is one or holds over MAX_ENTRIES: a tracker's library writes into its store by path,
    so one that came with a run folder would lead those writes to a file of the host. Links within it
    stay (W&B's latest-run)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return folder
    seen, inside = 0, os.path.realpath(folder) + os.sep
    for root, folders, files in os.walk(folder):  # links to folders are listed, never entered
        for name in folders + files:
            seen += 1
            path = Path(root) / name
            if seen > MAX_ENTRIES:
                return folder
            if path.is_symlink() and not os.path.realpath(path).startswith(inside) or not path.is_symlink() and not (
                    path.is_dir() or path.is_file()):
                return path
        if not deep:
            break
    return None
