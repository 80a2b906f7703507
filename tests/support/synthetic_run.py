"""A synthetic run folder, for the dashboard's tests and bench (issue 16): 1,000 nodes in seconds.

`make_run` writes what `python -m run_optimization --domain imo_grading` leaves in its run
folder, in the shapes the loop writes, without a model or a sandbox: `run.json`, the bare
repository `repo/` (every node with a change is a real commit `refs/nodes/<id>`, child of its
parent's, with a small edit of task_agent/task_agent.py or, for some nodes, of the meta agent
only), `nodes/<id>/` (node.json, patch.diff from git, meta_stdout.log, worker.log), `evals/<key>/`
under the keys `EvalStore.key` gives (shared by nodes whose task agent did not change, as the
real store does), `feedback/`, `untrusted/<id>/meta/` transcripts, `archive.jsonl`,
`train_data/` and a ledger whose calls add up to each node's cost. Records are made with the
project's record classes, reports with domains.metrics.grading_metrics on the real data set's
ids and labels, calls with services.ledger.Ledger, the repository with services.workspace.

What differs from a real run, on purpose: texts are cut short (predictions.csv holds the data set's
long text columns cut to `CSV_TEXT_CHARS` characters, since the full texts would make 1,000 nodes
weigh gigabytes, and a transcript's first two messages stand in briefly for the meta agent's
prompts); no file is synced (each is made by the loop's own functions, the sync left out); and the
task agent's per-row chat histories (untrusted/<id>/agent_evals/), the pictures and report.html are
not written.

With `hostile=True`, text an agent could have written carries the strings of `ATTACKS`
(patch lines, file names, transcripts, predictions, logs, an error), and three transcripts
are a link to /etc/passwd, a fifo and a 5 MB file.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import os
import random
import socket
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate
from pathlib import Path

import pandas as pd

from agent.base_agent import AgentSystem
from agent.tool_loop import log_message
from archive.eval_store import EvalStore
from archive.records import GenStart, MetaResult, Node, RunRecord, Status
from archive.store import META_TRANSCRIPT, event_line, mean_score, untrusted_dir
from domains.harness import JOURNAL, PREDICTIONS, Journal, write_predictions
from domains.harness.split import SplitResult, fingerprint, run_record
from domains.harness.worker_pipe import copy_log
from domains.metrics import LABELS, grading_metrics, normalize_label
from domains.registry import get_domain
from domains.scoring import REPORT_SCHEMA
from optimizer.feedback import publish_feedback, write_train_data
from optimizer.meta_outcome import META_LOG, meta_log
from search.stats import wilson
from services.config import PROJECT_ROOT, load_config
from services.fsutil import atomic_write_json, atomic_write_text
from services.ledger import Call, Ledger, Totals
from services.workspace import NOT_TASK_AGENT, RunRepo, read_workspace

ATTACKS = {  # what hostile agent text tries; a page that escapes it shows it as text and runs none of it
    "script": "<script>window.__pwned=1</script>",
    "img": '<img src=x onerror="window.__pwned=1">',
    "svg": '"><svg onload=window.__pwned=1>',
    "javascript_url": "javascript:window.__pwned=1",
    "markdown_link": "[open the results](javascript:window.__pwned=1)",
    "anchor": '<a href="javascript:window.__pwned=1">details</a>',
    "iframe": '<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>',
}
DOMAIN = "imo_grading"
TASK_MODEL = "openai/o4-mini"
META_MODEL = "anthropic/claude-sonnet-4-5-20250929"
PRICES = {TASK_MODEL: (1.1e-6, 4.4e-6), META_MODEL: (3e-6, 15e-6)}  # USD per prompt, completion token (litellm's)
CSV_TEXT_CHARS = 40  # the data set's long text columns in predictions.csv, cut to this many characters
BIG_TRANSCRIPT = 5 * 2**20 + 4096  # bytes of the one huge transcript (hostile runs)

_WORKERS = 5  # rows evaluated at once (harness.num_workers)
_TEXT_COLUMNS = ("Problem", "Solution", "Grading guidelines", "Response")
_TASK_FILE, _META_FILE = "task_agent/task_agent.py", "meta_agent/meta_agent.py"
_RULES = ("A proof that assumes what it must show earns at most partial.",
          "Check each case split: a missing case is not a minor omission.",
          "A correct final answer with no argument is incorrect.",
          "Compare the student's key lemma with the reference solution's before grading.",
          "Computational slips that do not affect the argument still allow almost.",
          "Follow the grading guidelines' partial-credit items literally.",
          "An argument by picture or by example is not a proof.",
          "Read the whole answer before deciding; late fixes count.",
          "Induction without a base case is at most partial.",
          "Claims marked obvious must be checked like any other step.")
_META_NOTES = ("Before editing, list the labels the agent confuses most in the latest report.json.",
               "Prefer one focused change per generation and test it with the try command.",
               "Read the rows whose prediction misses the label before changing the prompt.",
               "Keep the answer format unchanged: a label the parser cannot read scores zero.")
_WRONG = {label: [other for other in LABELS if other != label] for label in LABELS}
_MISSING_MODULES = ("rubric_cache", "proof_checker", "label_vote", "step_parser")
# (status, change) by weight; change: task (the task agent), meta (the meta agent only), load (a task
# agent that does not import), none (nothing committed)
_DRAWS = (((Status.OK, "task"), 48), ((Status.OK, "meta"), 20), ((Status.NO_CHANGE, "none"), 12),
          ((Status.META_FAILED, "task"), 3), ((Status.META_FAILED, "none"), 4), ((Status.LOAD_FAILED, "load"), 6),
          ((Status.EVAL_FAILED, "task"), 2))
_FIRST = {1: (Status.OK, "task"), 2: (Status.NO_CHANGE, "none"), 3: (Status.META_FAILED, "task"),
          4: (Status.LOAD_FAILED, "load"), 5: (Status.EVAL_FAILED, "task"), 6: (Status.OK, "meta")}
_HOSTILE = {7: "attacks", 8: "error", 9: "symlink", 10: "fifo", 11: "big_transcript"}


@dataclass
class _Row:
    """One evaluated row: its index in the split, what the agent answered, what it cost."""

    index: int
    prediction: str | None
    error: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float
    finish: float  # the order rows finish in (threads take rows in order, finish out of it)


@dataclass
class _Gen:
    """One generation as drawn, then as it unfolded."""

    node_id: str
    parent: str | None
    generation: int
    status: Status
    change: str  # task | meta | load | none
    role: str | None = None  # the hostile part it plays (see _HOSTILE)
    skill: float = 0.45  # chance its task agent grades a row right, inherited and drifting
    broken: bool = False  # its task agent answers nothing valid (fails the screening)
    flight: str | None = None  # meta | eval: still at work when the run was read
    lines: dict[str, list[str]] = field(default_factory=dict)  # the two edited files, as lines
    listing: dict[str, tuple[str, str]] = field(default_factory=dict)  # task-agent path -> (mode, blob)
    files: dict[str, bytes] = field(default_factory=dict)  # files its commit changes
    dropped: dict[str, str] = field(default_factory=dict)  # what its capture left out, and why
    task_hash: str = ""
    start: float = 0.0  # run seconds
    meta_s: float = 0.0
    meta_end: float = 0.0  # when its change was committed (0: the meta agent is still at work)
    error: str | None = None  # why the meta agent failed
    load_error: str | None = None  # why its task agent does not import
    stop_run: dict | None = None  # the evaluation the budget stopped
    created: float = 0.0
    node: Node | None = None
    commit: str | None = None
    patch: str = ""
    stats: dict = field(default_factory=lambda: {"files": 0, "insertions": 0, "deletions": 0})

    @property
    def committed(self) -> bool:
        return self.change != "none" and self.flight != "meta"


def make_run(run_dir: Path, nodes: int = 1000, seed: int = 0, hostile: bool = False, in_flight: int = 0,
             feedback: bool = False, now: float | None = None, pid: int | None = None, name: str | None = None,
             tags: list | None = None) -> dict:
    """Write a run of `nodes` recorded nodes (`initial`, then generations 1..nodes-1) into the new
    folder `run_dir`, and `in_flight` generations started after them: the first has its change
    committed and its staged evaluation under way, the others have their meta agent at work.

    With `feedback`, it also writes `feedback/<id>/`, what the loop publishes for later meta agents
    (no page reads them; optimizer.feedback.publish_feedback writes them, synced, about four files a node).

    The run's last event is at `now` (default: the present). Its `run_start` names process `pid`
    on this machine (default: the caller's, so a run with generations in flight reads as live
    while the caller runs); a run without generations in flight has ended (`run_end`).

    Returns: run_dir, nodes (recorded ids, oldest first), statuses (id -> status), best (the
    node the loop ranks first), in_flight (ids), evaluating (the in-flight id with a partial
    evaluation, or None), hostile (what -> node id: patch, file_names, dropped_names, transcript,
    predictions, meta_stdout, worker_log, error, symlink, fifo, big_transcript; empty unless
    hostile), evals (folders under evals/), calls (ledger rows), cost_usd (the run's).

    `name` and `tags`, when given, are written to run.json as `--name` and `--tag` write them
    (anything JSON can hold: a reader must bound and check them)."""
    if nodes < 1 or in_flight < 0 or (hostile and nodes < 12):
        raise ValueError(f"need nodes >= 1 (12 with hostile=True) and in_flight >= 0, got {nodes}, {in_flight}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    maker = _Maker(run_dir, seed, hostile, feedback)
    maker.run_labels = {**({"name": name} if name is not None else {}), **({"tags": tags} if tags is not None else {})}
    maker.plan(nodes, in_flight)
    maker.simulate()
    return maker.write(time.time() if now is None else now, os.getpid() if pid is None else pid)


def shown_rows(split: str):
    """The data set's rows of `split` as the synthetic predictions.csv holds them (long texts cut)."""
    rows = get_domain(DOMAIN).load(split).copy()
    for column in _TEXT_COLUMNS:
        rows[column] = rows[column].str.slice(0, CSV_TEXT_CHARS)
    return rows


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _task_hash(listing: dict[str, tuple[str, str]]) -> str:
    """RunRepo.task_agent_hash of a commit whose task-agent files are `listing`, without git:
    `ls-tree -r` lists full paths in byte order (git sorts a folder as its name and "/")."""
    return hashlib.sha256("\n".join(f"{mode} blob {sha}\t{path}" for path, (mode, sha) in sorted(listing.items()))
                          .encode()).hexdigest()


def _region(lines: list[str], start: str, end: str) -> tuple[int, int]:
    """The lines strictly inside the block that opens on the line after the one holding `start`
    and ends before the next one holding `end` (the middle third of the file without them)."""
    try:
        lo = next(i for i, line in enumerate(lines) if start in line) + 2
        return lo, next(i for i in range(lo, len(lines)) if end in lines[i])
    except StopIteration:
        return len(lines) // 3, 2 * len(lines) // 3


def _edited(lines: list[str], region: tuple[str, str], new: list[str], rng: random.Random) -> list[str]:
    out = list(lines)
    lo, hi = _region(out, *region)
    if hi - lo > 3 and rng.random() < 0.3:
        del out[rng.randrange(lo, hi)]
        hi -= 1
    at = rng.randint(lo, hi)
    out[at:at] = new
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


def _cost(model: str, prompt: int, completion: int) -> float:
    per_in, per_out = PRICES[model]
    return prompt * per_in + completion * per_out


class _Maker:
    def __init__(self, run_dir: Path, seed: int, hostile: bool, feedback: bool):
        self.run_labels: dict = {}  # run.json's "name" and "tags", when the caller gives them
        self.run_dir, self.seed, self.hostile, self.feedback = run_dir, seed, hostile, feedback
        self.rng = random.Random(seed)
        self.domain = get_domain(DOMAIN)
        self.config = load_config()
        self.config.models.task, self.config.models.meta = TASK_MODEL, META_MODEL
        self.config.sandbox.backend = "bwrap"
        self.config.loop.seed = seed
        self.stage = self.domain.screening(self.config.loop)[0]
        self.store = EvalStore(run_dir)
        data = {s: self.domain.load(s) for s in ("train", "val")}
        self.ids = {s: [str(q) for q in df[self.domain.question_id]] for s, df in data.items()}
        self.labels = {s: [normalize_label(x) for x in df[self.domain.label_column]] for s, df in data.items()}
        self.fingerprints = {s: [fingerprint(self.domain.format_inputs(r)) for r in df.to_dict("records")]
                             for s, df in data.items()}
        self.prompts = {s: [600 + len(json.dumps(self.domain.format_inputs(r))) // 4 for r in df.to_dict("records")]
                        for s, df in data.items()}
        self.shown = {s: shown_rows(s) for s in data}
        self.repo = RunRepo.create(run_dir / "repo", PROJECT_ROOT)
        self.gens: list[_Gen] = []
        self.events: list[tuple[float, str, object]] = []  # (run seconds, event, fields or a gen to make them of)
        self.calls: list[tuple[float, Call]] = []
        self.eval_runs: list[dict] = []  # run.json of each harness run, with run seconds for its times
        self.reports: dict[str, dict] = {}
        self.journals: dict[str, list[_Row]] = {}  # the staged runs' rows, in their journal's order
        self.outcomes: dict[tuple[str, str], list[_Row]] = {}
        self.spent: dict[str, dict[str, list]] = {}  # node -> role -> [dollars, tokens]
        self.run_name = run_dir.name  # the gateway's run_id
        self.log_cap = int(self.config.sandbox.output_cap_mb * 2**20)  # of a worker.log, as the harness caps it
        self.start = self.end = 0.0

    # -- what happens -----------------------------------------------------------------------
    def plan(self, nodes: int, in_flight: int) -> None:
        """Draw every generation: parent, outcome, change; and make each change's files."""
        initial = self.repo.node_commit("initial")
        root = _Gen("initial", None, 0, Status.OK, "task")
        for line in self.repo.git("ls-tree", "-r", initial).splitlines():
            meta, path = line.split("\t", 1)
            mode, _, sha = meta.split()
            if path.split("/", 1)[0] not in NOT_TASK_AGENT:
                root.listing[path] = (mode, sha)
            if path in (_TASK_FILE, _META_FILE):
                root.lines[path] = self.repo.git("cat-file", "blob", sha).split("\n")
        root.task_hash, root.commit = _task_hash(root.listing), initial
        self.gens.append(root)
        self.config.loop.max_generation = nodes - 1 + in_flight
        self.config.loop.parallel = max(1, in_flight)
        valid = [root]
        budget = {nodes - 1, nodes - 2} if nodes >= 50 else {nodes - 1} if nodes >= 20 else set()
        weights = [w for _, w in _DRAWS]
        for g in range(1, nodes + in_flight):
            status, change = _FIRST.get(g) or self.rng.choices([d for d, _ in _DRAWS], weights)[0]
            if g in budget:
                status, change = Status.BUDGET_STOPPED, "task"
            role = _HOSTILE.get(g) if self.hostile else None
            if role == "attacks":
                status, change = Status.OK, "task"
            elif role == "error":
                status, change = Status.META_FAILED, "none"
            flight = None if g < nodes else "eval" if g == nodes else "meta"
            if flight:
                status, change = Status.OK, "task" if flight == "eval" else "none"
            gen = self._child(self.rng.choice(valid), g, status, change, role, flight)
            self.gens.append(gen)
            if status == Status.OK and not flight:
                valid.append(gen)

    def _child(self, parent: _Gen, g: int, status: Status, change: str, role: str | None,
               flight: str | None) -> _Gen:
        rng = self.rng
        gen = _Gen(str(g), parent.node_id, g, status, change, role, parent.skill, flight=flight,
                   lines=dict(parent.lines), listing=dict(parent.listing), task_hash=parent.task_hash)
        if change == "task":
            new = [f"- {ATTACKS[k]}" for k in ATTACKS] if role == "attacks" else \
                [f"- {rule}" for rule in rng.sample(_RULES, rng.randint(1, 3))]
            gen.lines[_TASK_FILE] = _edited(parent.lines[_TASK_FILE], ("def grading_instruction", "## Problem"),
                                            new, rng)
            gen.skill = min(0.9, max(0.2, parent.skill + rng.gauss(0.01, 0.05)))
            gen.broken = role is None and rng.random() < 0.08
        elif change == "meta":
            gen.lines[_META_FILE] = _edited(parent.lines[_META_FILE], ("def instruction(", "find {eval_path}"),
                                            [rng.choice(_META_NOTES)], rng)
        elif change == "load":
            lines = list(parent.lines[_TASK_FILE])
            at = max((i for i, line in enumerate(lines) if line.startswith("from agent.")), default=0) + 1
            module = rng.choice(_MISSING_MODULES)
            lines.insert(at, f"from agent.{module} import {module.split('_')[0]}  # faster than asking the model")
            gen.lines[_TASK_FILE] = lines
            gen.load_error = f"No module named 'agent.{module}'"
        if not gen.committed:
            return gen
        gen.files = {path: "\n".join(lines).encode() for path, lines in gen.lines.items()
                     if lines is not parent.lines[path]}
        if role == "attacks":
            gen.files[f"task_agent/{ATTACKS['script']}"] = "\n".join(ATTACKS.values()).encode() + b"\n"
            gen.dropped = self._dropped_names()
        for path, data in gen.files.items():
            if path.split("/", 1)[0] not in NOT_TASK_AGENT:
                gen.listing[path] = ("100644", _blob_sha(data))
        gen.task_hash = _task_hash(gen.listing)
        return gen

    @staticmethod
    def _dropped_names() -> dict[str, str]:
        """What the capture leaves out of a workspace holding hostile names and a link, as it says."""
        with tempfile.TemporaryDirectory(prefix="synthetic-capture-") as scratch:
            folder = Path(scratch) / "task_agent"
            folder.mkdir()
            for key in ("img", "svg"):
                (folder / ATTACKS[key]).write_text("x\n")
            (folder / ATTACKS["javascript_url"]).symlink_to("/etc/passwd")
            return read_workspace(scratch).dropped

    def simulate(self) -> None:
        """Every generation in turn, on a clock of run seconds: calls, events, evaluations, files."""
        t = 0.0
        for model in (TASK_MODEL, META_MODEL):  # the start-up's preflight calls
            t += self.rng.uniform(0.3, 2.0)
            self._book(t, "preflight", "preflight", model, 3, 1, 0.3)
        self.start = t = t + 1.0
        self.events.append((t, "run_start", {}))
        for gen in self.gens:
            if not gen.flight:
                t = self._generation(gen, t + self.rng.uniform(0.5, 4.0))
        flights = [g for g in self.gens if g.flight]
        if flights:
            self.end = self._flights(flights, t)
        else:
            self.end = t + 0.5
            self.events.append((self.end, "run_end", {}))

    def _generation(self, gen: _Gen, t: float) -> float:
        """A recorded generation from its start at `t`; returns when its node was recorded."""
        gen.start = t
        self._started(gen)
        node = gen.node = Node(gen.node_id, gen.parent, gen.generation)
        if gen.parent is None:
            gen.created = t
            end = self._evaluate(gen, t + self.rng.uniform(5, 15))
        else:
            self._meta(gen, t)
            self.events.append((gen.meta_end, "meta_done", gen))
            gen.created = gen.meta_end
            node.seconds["meta"] = gen.meta_s
            end = gen.meta_end + self.rng.uniform(0.05, 0.3)
            if gen.status in (Status.META_FAILED, Status.NO_CHANGE):
                node.status, node.error = gen.status, gen.error
            else:
                end = self._evaluate(gen, end)
            node.seconds["total"] = round(end - t, 3)
        for role, (cost, tokens) in self.spent.get(gen.node_id, {}).items():
            node.cost_usd[role], node.tokens[role] = round(cost, 6), tokens
        self._node_files(gen)
        self.events.append((end, "node_recorded", gen))
        return end

    def _started(self, gen: _Gen) -> None:
        self.events.append((gen.start, "gen_start", GenStart(gen.node_id, gen.parent, gen.generation).to_dict()))

    def _flights(self, flights: list[_Gen], t: float) -> float:
        """The generations at work when the run is read: the first evaluating its change, the
        others with their meta agent at work. Returns the time the run is read at."""
        first = flights[0]
        first.start = t + self.rng.uniform(1, 5)
        self._started(first)
        self._meta(first, first.start)
        self.events.append((first.meta_end, "meta_done", first))
        self._node_files(first)
        end = self._split(first, "train", self.stage.rows, first.meta_end + self.rng.uniform(2, 10),
                          stop=self.rng.randint(2, self.stage.rows - 2))[2]
        now = max(end + self.rng.uniform(1, 5), first.start + 60)
        for gen in flights[1:]:
            # Early enough for its first model call (at most 43 s in: see _meta), so its transcript has begun.
            gen.start = self.rng.uniform(first.start, now - 45)
            self._started(gen)
            self._meta(gen, gen.start, until=now)
            self._node_files(gen)
        return now

    # -- the meta agent -----------------------------------------------------------------------
    def _meta(self, gen: _Gen, t: float, until: float | None = None) -> None:
        """The meta agent's calls (and its try command's) from `t`, its transcript and how it ended;
        with `until`, only what it did before then (it is still at work)."""
        rng = self.rng
        clock = t + rng.uniform(3, 8)  # the sandbox starts
        prompt, turns = 2400 + rng.randint(0, 900), []
        count = rng.randint(4, 28)
        tries = rng.randrange(1, count) if gen.change != "none" and rng.random() < 0.6 else None
        for i in range(count):
            latency = rng.uniform(4, 35)
            clock += latency
            if until is not None and clock > until:
                break
            completion = rng.randint(120, 1400)
            self._book(clock, gen.node_id, "meta", META_MODEL, prompt, completion, latency)
            turns.append((prompt, completion))
            prompt += completion + rng.randint(200, 2500)  # the tool's result joins the conversation
            clock += rng.uniform(0.5, 20)
            if i == tries:  # the try command: the task agent on 5 train rows
                for _ in range(5):
                    clock += rng.uniform(2, 12)
                    self._book(clock, gen.node_id, "try", TASK_MODEL, rng.randint(1500, 4000), rng.randint(300, 2500),
                               rng.uniform(2, 12))
        if until is not None:
            self._transcript(gen, turns, finished=False)
            return
        timeout = gen.status == Status.META_FAILED and gen.role != "error" and rng.random() < 0.4
        if timeout:
            clock = t + self.config.loop.meta_timeout_s + rng.uniform(0.5, 3)
        gen.meta_s = round(clock - t + rng.uniform(0.3, 2), 3)
        gen.meta_end = t + gen.meta_s + rng.uniform(0.1, 0.8)  # the capture and commit
        if gen.role == "error":
            gen.error = f"meta agent exit code 1: ValueError: {ATTACKS['img']} {ATTACKS['script']}"
        elif timeout:
            gen.error = f"meta agent killed after the {self.config.loop.meta_timeout_s:.0f} s wall-clock limit: "
        elif gen.status == Status.META_FAILED:
            gen.error = "meta agent exit code 1: RuntimeError: the model call failed after 5 tries: 529 overloaded"
        self._transcript(gen, turns, finished=not timeout)

    def _transcript(self, gen: _Gen, turns: list[tuple[int, int]], finished: bool) -> None:
        """The transcript as the meta agent logs it: each message through agent/tool_loop.py's
        log_message into AgentSystem.log, then how the conversation ended."""
        path = untrusted_dir(self.run_dir, gen.node_id, "meta") / META_TRANSCRIPT
        if gen.role == "symlink":
            path.symlink_to("/etc/passwd")
            return
        if gen.role == "fifo":
            os.mkfifo(path)
            return
        left = self.config.loop.max_generation - gen.generation
        messages = [{"role": "system", "content": (
                        "You can use tools. To call one, end your reply with exactly one tool call in this form:\n"
                        '<json>\n{"tool_name": "bash", "tool_input": {"command": "<command>"}}\n</json>\nMake at '
                        f"most one tool call per reply. You can make at most {self.config.loop.meta_max_calls} tool "
                        "calls.")},
                    {"role": "user", "content": (
                        "You improve an AI agent system by editing its code. The repository is at /workspace. "
                        "Earlier generations' results on the train split are in /feedback (read-only).\n\n"
                        f"Iterations left in this run: {left}.\n\n`python /opt/hyperagents/try_agent.py --rows 5` "
                        "runs the current task agent on train rows and prints its score.")}]
        failed = gen.status == Status.META_FAILED and "exit code" in (gen.error or "")
        for i in range(len(turns)):
            if finished and not failed and i == len(turns) - 1:
                messages.append({"role": "assistant", "content": self._closing(gen)})
                break
            command, result = self._tool(gen, i)
            call = json.dumps({"tool_name": "bash", "tool_input": {"command": command}})
            messages += [{"role": "assistant",
                          "content": f"Next I run `{command.splitlines()[0][:60]}`.\n<json>\n{call}\n</json>"},
                         {"role": "user", "content": f"Tool result:\n{result}"}]
        if gen.role == "attacks":
            messages.append({"role": "assistant",
                             "content": "\n\n".join(f"{name}: {text}" for name, text in ATTACKS.items())})
        if gen.role == "big_transcript":
            flood = "Tool result:\n" + "the same long output line, again and again\n" * 200
            messages += [{"role": "user", "content": flood}] * (BIG_TRANSCRIPT // len(flood) + 1)
        agent = AgentSystem(META_MODEL, str(path))
        for message in messages:
            log_message(agent.log, message)
        if failed:
            agent.log("## error\n\nThe model call failed (HTTP 529), so the tool loop stops: APIError: overloaded")
        elif finished:
            agent.log(f"## usage\n\n{len(turns)} model calls, {sum(p for p, _ in turns)} prompt tokens, "
                      f"{sum(c for _, c in turns)} completion tokens")

    def _tool(self, gen: _Gen, i: int) -> tuple[str, str]:
        """The i-th tool call of a meta agent's conversation and what it returned."""
        parent = gen.parent or "initial"
        steps = [("find /feedback -name report.json | sort | tail -5",
                  "\n".join(f"/feedback/{p}/imo_grading/report.json" for p in ("initial", parent))),
                 ((f"python -c \"import json; r = json.load(open('/feedback/{parent}/imo_grading/report.json')); "
                   "print(r['overall_accuracy'], r['per_label'])\""),
                  ("0.52 {'incorrect': {'precision': 0.61, 'recall': 0.7}, 'partial': {'precision': 0.3, "
                   "'recall': 0.21}, 'almost': {'precision': 0.0, 'recall': 0.0}, 'correct': {'precision': 0.66}}")),
                 ("sed -n 24,36p task_agent/task_agent.py",
                  "\n".join((gen.lines.get(_TASK_FILE) or [])[23:36])),
                 ("python /opt/hyperagents/try_agent.py --rows 5",
                  f"5 rows: {self.rng.randint(1, 5)} right, 0 errors (accuracy on these rows only)")]
        command, result = steps[i % len(steps)]
        if gen.role == "attacks" and i == 1:
            result += f"\n{ATTACKS['markdown_link']}\n{ATTACKS['anchor']}\n{ATTACKS['iframe']}"
        return command, result

    @staticmethod
    def _closing(gen: _Gen) -> str:
        if gen.change == "meta":
            return "I changed the meta agent's instructions: it now studies the missed rows before editing."
        if gen.change in ("task", "load"):
            return "I tightened the grading rubric in task_agent/task_agent.py and tested it on 5 train rows."
        return "The current prompt already covers the mistakes I found; I made no change."

    def _node_files(self, gen: _Gen) -> None:
        """What the loop writes in nodes/<id>/ besides node.json and patch.diff: the logs."""
        folder = self.run_dir / "nodes" / gen.node_id
        folder.mkdir(parents=True, exist_ok=True)
        worker = ""
        if gen.status == Status.LOAD_FAILED:
            worker = ("Traceback (most recent call last):\n  File \"/opt/hyperagents/worker.py\", line 230, in main\n"
                      f"ModuleNotFoundError: {gen.load_error}\n")
        if gen.role == "attacks":
            worker = f"warning from the agent: {ATTACKS['script']} {ATTACKS['img']}\n"
        copy_log(io.StringIO(worker), folder / "worker.log", self.log_cap, lambda: None)  # no worker to kill
        if gen.parent is None or not gen.meta_end:
            return
        stdout = f"edited with {ATTACKS['svg']} {ATTACKS['anchor']}\n" if gen.role == "attacks" else ""
        stderr = ""
        if gen.error and "exit code" in gen.error:
            stderr = "Traceback (most recent call last):\n  File \"/opt/hyperagents/run_meta.py\", line 80\n" + \
                gen.error.split(": ", 1)[1] + "\n"
        atomic_write_text(folder / META_LOG, meta_log(stdout, stderr), sync=False)

    # -- evaluation -----------------------------------------------------------------------------
    def _evaluate(self, gen: _Gen, t: float) -> float:
        """The node's check and staged, then full evaluation, from `t`; returns when it ended."""
        node, rng = gen.node, self.rng
        node.seconds["check"] = check = round(rng.uniform(2, 12), 3)
        t += check
        if gen.status == Status.LOAD_FAILED:
            node.status = gen.status
            node.error = f"cannot load TaskAgent from task_agent: ModuleNotFoundError: {gen.load_error}"
            return t
        started, full = t, len(self.ids["train"])
        score, key, t = self._split(gen, "train", self.stage.rows, t)
        splits = {"train": (score, self.stage.rows, key)}
        if gen.status in (Status.EVAL_FAILED, Status.BUDGET_STOPPED):
            t = self._split(gen, "train", full, t, stop=rng.randint(5, 60))[2]
            node.status = gen.status
            if gen.status == Status.EVAL_FAILED:
                node.error = (f"ProtocolError: the worker ended row {self.ids['train'][rng.randrange(full)]}, "
                              "which it never started")
            return t
        if score is not None and score > self.stage.above:
            for split in self.domain.full_splits():
                score, key, t = self._split(gen, split, len(self.ids[split]), t)
                splits[split] = (score, len(self.ids[split]), key)
            node.full_eval[DOMAIN] = True
        else:
            node.full_eval[DOMAIN] = False
        node.scores[DOMAIN] = {s: v[0] for s, v in splits.items()}
        node.samples[DOMAIN] = {s: v[1] for s, v in splits.items()}
        node.eval_keys[DOMAIN] = {s: v[2] for s, v in splits.items()}
        # As the loop records them (search.stats.interval): the rows score 0 or 1, so Wilson's.
        node.intervals[DOMAIN] = {s: [round(b, 4) for b in wilson(round(v[0] * v[1]), v[1])]
                                  for s, v in splits.items() if v[0] is not None}
        node.seconds["eval"] = round(t - started, 3)
        return t

    def _split(self, gen: _Gen, split: str, rows: int, t: float, stop: int | None = None):
        """One evaluation from `t` (reused when its key has a report): (score, key, end). With `stop`,
        only that many rows ran (the budget or a protocol error stopped it, or it is under way)."""
        key = self.store.key(gen.task_hash, DOMAIN, split, rows, TASK_MODEL)
        if key in self.reports:
            return self.reports[key]["overall_accuracy"], key, t + self.rng.uniform(0.005, 0.05)
        self.events.append((t, "split_start", {"node_id": gen.node_id, "domain": DOMAIN, "split": split,
                                               "rows": rows, "key": key}))
        outcome = self._outcome(gen, split)
        smaller = self.store.key(gen.task_hash, DOMAIN, split, self.stage.rows, TASK_MODEL)
        done = list(self.journals.get(smaller, [])) if split == "train" and rows > self.stage.rows else []
        todo = sorted(outcome[len(done):rows], key=lambda r: r.finish)[:stop]
        clock = t + self.rng.uniform(0.3, 2)
        busy = 0.0
        for row in todo:
            busy += row.seconds
            self._book(clock + busy / _WORKERS, gen.node_id, "task", TASK_MODEL, row.prompt_tokens,
                       row.completion_tokens, row.seconds, row.cost_usd)
        done += todo
        end = clock + busy / _WORKERS + self.rng.uniform(0.2, 1)
        folder = self.store.folder(key)
        folder.mkdir(parents=True)
        journal = Journal(folder / JOURNAL, sync=False)
        try:
            for row in done:
                journal.append(self._record(split, row))
        finally:
            journal.close()
        if stop is None and rows == self.stage.rows:
            self.journals[key] = done
        if gen.flight:
            return None, key, end  # a live evaluation: its journal so far, nothing else yet
        write_predictions(self.shown[split].head(rows), self.domain.question_id, journal, folder / PREDICTIONS,
                          self.config.harness.max_prediction_bytes, sync=False)
        ran = {row.index: row for row in done}
        ran = [ran.get(i) for i in range(rows)]
        run = {"key": key, "split": split, "rows": rows, "start": t, "end": end,
               "done": sum(1 for r in ran if r and not r.error), "errors": sum(1 for r in ran if r and r.error),
               "not_run": ran.count(None)}
        if stop is not None:
            if gen.status == Status.BUDGET_STOPPED:  # run_split wrote its run.json; a protocol error did not
                self.eval_runs.append(run)
                gen.stop_run = run
            return None, key, end
        self.eval_runs.append(run)
        df = pd.DataFrame({"Grading ID": self.ids[split][:rows], "Reward": self.labels[split][:rows],
                           "prediction": [r.prediction for r in ran]}, dtype=object)
        report = self.reports[key] = {"schema_version": REPORT_SCHEMA, **grading_metrics(df)}
        atomic_write_json(self.store.report_path(key), report, sync=False)
        return report["overall_accuracy"], key, end

    def _outcome(self, gen: _Gen, split: str) -> list[_Row]:
        """How the node's task agent does on every row of `split`: the same for every evaluation of
        that agent, so a longer run repeats a shorter one's first rows."""
        cached = self.outcomes.get((gen.task_hash, split))
        if cached is not None:
            return cached
        rng = random.Random(f"{self.seed}/{gen.task_hash}/{split}")
        skill = 0.0 if gen.broken else gen.skill - (0.03 if split == "val" else 0.0)
        first = 10 if split == "train" else 0  # past the staged rows, so the attacks do not fail the screening
        attack_rows = dict(zip(range(first, first + len(ATTACKS)), ATTACKS.values())) if gen.role == "attacks" else {}
        rows, draw = [], rng.random  # random() alone: randint and friends cost seconds over a run's rows
        for i, truth in enumerate(self.labels[split]):
            roll, error = draw(), None
            if gen.broken:
                prediction = "None"
            elif i in attack_rows:
                prediction = attack_rows[i]
            elif gen.role == "attacks" and i == first + len(ATTACKS):
                prediction, error = None, f"ValueError: the model answered {ATTACKS['img']}\nand more"
            elif roll < 0.004:
                prediction, error = None, "TimeoutError: the row took over 1800 s and was stopped"
            elif roll < 0.012:
                prediction = "None"
            elif draw() < skill + 0.15 * ((i * 7919) % 13 / 6 - 1) or (gen.role == "attacks" and i == 0):
                prediction = truth
            else:
                prediction = _WRONG[truth][int(draw() * 3)]
            prompt, completion = self.prompts[split][i] + int(draw() * 60), 250 + int(draw() * 2550)
            rows.append(_Row(i, prediction, error, prompt, completion, round(_cost(TASK_MODEL, prompt, completion), 8),
                             round(3 + 30 * draw() ** 2, 3), i + 4 * draw()))
        self.outcomes[(gen.task_hash, split)] = rows
        return rows

    def _record(self, split: str, row: _Row) -> dict:
        """A row's journal record as the harness keeps it (the worker's answer, the inputs' fingerprint)."""
        usage = {"calls": 1, "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
                 "cost_usd": row.cost_usd}
        return {"id": self.ids[split][row.index], "prediction": row.prediction, "error": row.error, "usage": usage,
                "seconds": row.seconds, "inputs_sha": self.fingerprints[split][row.index]}

    def _book(self, t: float, node: str, role: str, model: str, prompt: int, completion: int, latency: float,
              cost: float | None = None) -> None:
        if cost is None:
            cost = round(_cost(model, prompt, completion), 8)
        self.calls.append((t, Call(self.run_name, node, role, model, prompt, completion, cost, latency)))
        spent = self.spent.setdefault(node, {}).setdefault(role, [0.0, 0])
        spent[0] += cost
        spent[1] += prompt + completion

    # -- on disk ----------------------------------------------------------------------------------
    def write(self, now: float, pid: int) -> dict:
        """Everything whose content depends on the clock, with the run's last event at `now`."""
        base = now - self.end
        self._commit(base)
        self._diffs()
        cumulative = self._ledger(base)
        self._budget(cumulative)
        for gen in self.gens:
            self._records(gen, base)
        self._events(base, pid)
        for run in self.eval_runs:
            self._eval_run(run, base, cumulative)
        if self.feedback:
            for gen in self.gens:
                if gen.node is not None:
                    publish_feedback(self.run_dir, [self.domain], self.store, gen.node)
        record = RunRecord([DOMAIN], self.config.to_dict(), "bwrap", updated_at=_iso(base + self.start))
        atomic_write_json(self.run_dir / "run.json", {**record.to_dict(), **self.run_labels}, sync=False)
        write_train_data(self.run_dir, [self.domain])
        return self._summary(cumulative)

    def _commit(self, base: float) -> None:
        """Every node's commit in one `git fast-import` (commit_files makes one per call, with the
        whole tree): a child of its parent's, changing the files its meta agent changed."""
        marks, stream = {}, []
        by_id = {g.node_id: g for g in self.gens}
        for gen in self.gens[1:]:
            if not gen.committed:
                continue
            marks[gen.node_id] = mark = len(marks) + 1
            parent = f":{marks[gen.parent]}" if gen.parent in marks else by_id[gen.parent].commit
            message = f"node {gen.node_id}".encode()
            stream.append(f"commit refs/nodes/{gen.node_id}\nmark :{mark}\ncommitter hyperagents "
                          f"<hyperagents@localhost> {int(base + gen.meta_end)} +0000\ndata {len(message)}\n".encode()
                          + message + f"\nfrom {parent}\n".encode())
            for path, data in sorted(gen.files.items()):
                stream += [f"M 100644 inline {path}\ndata {len(data)}\n".encode(), data, b"\n"]
        stream.append(b"done\n")
        with tempfile.TemporaryDirectory(prefix="synthetic-marks-") as scratch:
            exported = Path(scratch) / "marks"
            self.repo.git("fast-import", "--quiet", "--done", "--force", f"--export-marks={exported}",
                          input=b"".join(stream))
            commits = dict(line.split() for line in exported.read_text().splitlines())
        for node_id, mark in marks.items():
            by_id[node_id].commit = commits[f":{mark}"]

    def _diffs(self) -> None:
        """Each commit's patch against its parent's and its numbers, from one `git diff-tree --stdin`
        each (the diff RunRepo.capture takes, per commit pair)."""
        by_id = {g.node_id: g for g in self.gens}
        children = [g for g in self.gens[1:] if g.committed]
        pairs = "".join(f"{g.commit} {by_id[g.parent].commit}\n" for g in children)
        options = ("--no-ext-diff", "--no-textconv", "--no-color")
        for what in ("-p", "--numstat"):
            out = self.repo.git("diff-tree", "--stdin", "-r", what, *options, input=pairs.encode())
            chunks, current = {}, None
            heads = {f"{g.commit}\n": g for g in children}
            for line in out.splitlines(keepends=True):
                if line in heads:
                    current = heads[line]
                    chunks[current.node_id] = []
                elif current is not None:
                    chunks[current.node_id].append(line)
            for gen in children:
                lines = chunks.get(gen.node_id, [])
                if what == "-p":
                    gen.patch = "".join(lines)
                    continue
                rows = [line.rstrip("\n").split("\t") for line in lines if line.strip()]
                gen.stats = {"files": len(rows), "insertions": sum(int(r[0]) for r in rows if r[0].isdigit()),
                             "deletions": sum(int(r[1]) for r in rows if r[1].isdigit())}

    def _ledger(self, base: float) -> tuple[list[float], list[tuple[float, int, int, int]]]:
        """The calls into the run's ledger, in time order, with their times; returns the run's
        totals after each call (times, (dollars, prompt tokens, completion tokens, calls))."""
        self.calls.sort(key=lambda c: c[0])
        ledger = Ledger(self.run_dir / "ledger.sqlite")
        db = ledger._db  # one transaction for all rows: a commit per call takes seconds for a run's 100,000 calls
        try:
            db.execute("BEGIN")
            for _, call in self.calls:
                ledger.record(call)
            db.executemany("UPDATE calls SET ts = ? WHERE id = ?",
                           [(base + t, i) for i, (t, _) in enumerate(self.calls, 1)])
            db.execute("COMMIT")
        finally:
            ledger.close()
        calls = [c for _, c in self.calls]
        totals = zip(accumulate(c.cost_usd for c in calls), accumulate(c.prompt_tokens for c in calls),
                     accumulate(c.completion_tokens for c in calls), range(1, len(calls) + 1))
        return [t for t, _ in self.calls], list(totals)

    @staticmethod
    def _at(cumulative, t: float) -> tuple[float, int, int, int]:
        times, totals = cumulative
        i = bisect.bisect_right(times, t)
        return totals[i - 1] if i else (0.0, 0, 0, 0)

    def _budget(self, cumulative) -> None:
        """A budget the run reached where its budget-stopped nodes stopped, and what they say of it."""
        stopped = [g for g in self.gens if g.status == Status.BUDGET_STOPPED]
        if not stopped:
            return
        budget = self.config.gateway.budget_usd = float(int(self._at(cumulative, stopped[0].stop_run["end"])[0]))
        for gen in stopped:
            run = gen.stop_run
            run["stopped_by"] = (f"budget exhausted: spent ${self._at(cumulative, run['end'])[0]:.4f} of "
                                 f"${budget:.4f}")
            gen.node.error = (f"{run['stopped_by']}; {run['not_run'] + run['errors']} rows not evaluated: raise the "
                              f"budget and rerun with --resume_from {self.store.folder(run['key'])}")

    def _records(self, gen: _Gen, base: float) -> None:
        folder = self.run_dir / "nodes" / gen.node_id
        if gen.parent is not None and gen.meta_end:
            atomic_write_text(folder / "patch.diff", gen.patch, sync=False)
        if gen.node is None:
            return
        node = gen.node
        node.commit = gen.commit
        node.created_at = _iso(base + gen.created)
        if gen.parent is not None:
            node.patch = self._patch(gen)
        atomic_write_json(folder / "node.json", node.to_dict(), sync=False)

    @staticmethod
    def _patch(gen: _Gen) -> dict:
        return {**gen.stats, "dropped": sorted(gen.dropped), "dropped_why": dict(gen.dropped)}

    def _events(self, base: float, pid: int) -> None:
        """archive.jsonl, its lines made by Archive.log's own event_line, in time order."""
        lines = []
        for t, event, what in sorted(self.events, key=lambda e: e[0]):
            if event == "run_start":
                fields = {"pid": pid, "host": socket.gethostname()}
            elif event == "meta_done":
                status = Status.META_FAILED if what.status == Status.META_FAILED else Status.OK
                result = MetaResult(status, what.commit, self._patch(what), what.meta_s,
                                    what.error if status == Status.META_FAILED else None)
                fields = {"node_id": what.node_id, **result.to_dict()}
            elif event == "node_recorded":
                fields = {"node_id": what.node_id, "status": what.node.status, "scores": what.node.scores}
            else:
                fields = what
            lines.append(event_line(event, _iso(base + t), **fields))
        (self.run_dir / "archive.jsonl").write_bytes(b"".join(lines))

    def _eval_run(self, run: dict, base: float, cumulative) -> None:
        """An evaluation folder's run.json by domains.harness.split.run_record: the gateway's totals are
        the whole run's so far, as a shared gateway gives them."""
        cost, prompt, completion, calls = self._at(cumulative, run["end"])
        folder = self.store.folder(run["key"])
        result = SplitResult(self.domain, folder, run["rows"], run["done"], run["errors"], run["not_run"],
                             run.get("stopped_by"), Totals(calls, prompt, completion, cost))
        asked = {"subset": run["split"], "proofs_dname": None, "num_samples": run["rows"]}
        atomic_write_json(folder / "run.json", run_record(result, "task_agent", asked, TASK_MODEL, "bwrap",
                                                          _iso(base + run["start"]), _iso(base + run["end"])),
                          sync=False)

    def _summary(self, cumulative) -> dict:
        recorded = [g for g in self.gens if g.node is not None]
        full = {DOMAIN: len(self.ids[self.domain.selection_split])}
        scored = [(mean_score(g.node, [self.domain], full), g.node) for g in recorded if g.node.valid_parent]
        flights = [g for g in self.gens if g.flight]
        hostile = {}
        if self.hostile:
            roles = {g.role: g.node_id for g in self.gens if g.role}
            attacks = roles["attacks"]
            hostile = {what: attacks for what in ("patch", "file_names", "dropped_names", "transcript",
                                                  "predictions", "meta_stdout", "worker_log")}
            hostile.update({what: roles[what] for what in ("error", "symlink", "fifo", "big_transcript")})
        return {"run_dir": str(self.run_dir), "nodes": [g.node_id for g in recorded],
                "statuses": {g.node_id: str(g.node.status) for g in recorded},
                "best": max(scored, key=lambda t: (t[0], t[1].generation))[1].node_id,
                "in_flight": [g.node_id for g in flights],
                "evaluating": next((g.node_id for g in flights if g.flight == "eval"), None),
                "hostile": hostile, "evals": sum(1 for _ in self.store.root.iterdir()),
                "calls": len(self.calls), "cost_usd": round(self._at(cumulative, self.end)[0], 6)}
