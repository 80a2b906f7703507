"""The agents a run can start from (`--initial_agent NAME` or `--initial_agent PATH`).

The project's own task agents: every workspace carries all of them under
`task_agent/baselines/`; the choice is the one line of `task_agent/__init__.py` that says
which module's `TaskAgent` the harness loads. The meta agent can read the others and
switch, as with any other code.

An agent folder (`paper`, the HyperAgents reference's generic agents in
`initial_agents/paper/`, or any folder a user names) is instead the whole evolvable code of
the run: its top-level modules and packages replace the project's agent code, with the
reference's interface (`task_agent:TaskAgent`, `meta_agent:MetaAgent`), and the run's
repository then takes every top-level name the folder had (services.workspace).

Which meta agent a project task agent starts with is `loop.initial_meta_agent`: `default`, the
project's (`meta_agent/`, beside all of the project's agent code); or `paper`, the reference's
one-line meta agent, which is how the reference starts from ProofAutoGrader (its BetterGrader run:
its `baselines/imo_grading/proofautograder.py` copied over its `task_agent.py`). Then the run starts
from `initial_agents/paper/` with that task agent written for the folder's own `agent/` package
(`PAPER_TASK_AGENTS`); a task agent the reference never started from keeps the project's meta agent.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from services.config import PROJECT_ROOT, Config
from services.errors import UserError
from services.local_model import is_local
from services.workspace import Quota, discard, read_workspace, write_files

AGENT_FOLDERS = PROJECT_ROOT / "initial_agents"
# What a folder such as a checkout of the reference holds beside its agents: its data, runs,
# baselines and tooling are not agent code (the reference leaves the same out of its evolvable copy).
NOT_AGENT_CODE = ("domains", "baselines", "outputs", "analysis", "misc", "tests", "docs", "venv", ".venv",
                  "Dockerfile", "setup_initial.sh", "requirements.txt", "requirements_dev.txt")
META_AGENTS = ("default", "paper")  # loop.initial_meta_agent
DEMO = "demo"  # the initial agent of --preset demo (configs/presets/demo.yaml)
DEMO_SCRIPT = "meta_agent/demo_script.py"  # the edits its meta agent replays (meta_agent/replay.py)
PAPER = "paper"  # the bundled folder of the reference's agents
# A project task agent the reference starts a run from -> its version on the paper folder's agent code,
# kept (like the reference's) under the folder's baselines/, which no workspace holds.
PAPER_TASK_AGENTS = {"proofautograder": "baselines/imo_grading/proofautograder.py"}


@dataclass(frozen=True)
class InitialAgent:
    name: str
    module: str  # where its TaskAgent is defined
    about: str
    cls: str = "TaskAgent"  # the class of `module` that is the task agent
    only: tuple[str, ...] | None = None  # the domains it is for, when fewer than its module's DOMAINS
    meta_module: str | None = None  # where its MetaAgent is defined, when not the project's meta_agent/meta_agent.py

    @cached_property
    def domains(self) -> tuple[str, ...] | None:
        """The domains it can do (None: all), as its module's `DOMAINS` tuple says: read from the
        source as data, since the core never imports agent code."""
        if self.only is not None:
            return self.only
        source = (PROJECT_ROOT / f"{self.module.replace('.', '/')}.py").read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DOMAINS" for t in node.targets):
                return tuple(ast.literal_eval(node.value))
        return None

    def apply(self, workspace: Path) -> None:
        """Make this agent the entry point of the task agent in `workspace` (the default already is), and its
        meta agent the meta agent's."""
        if self.module != INITIAL_AGENTS["default"].module or self.cls != "TaskAgent":
            (workspace / "task_agent" / "__init__.py").write_text(entry_source(self))
        if self.meta_module is not None:
            (workspace / "meta_agent" / "__init__.py").write_text(meta_entry_source(self))


INITIAL_AGENTS = {
    a.name: a
    for a in (
        InitialAgent("default", "task_agent.task_agent", "one model call per question with a parseable answer format"),
        InitialAgent("proofautograder", "task_agent.baselines.proofautograder",
                     "ProofAutoGrader as the HyperAgents reference runs it: first <points> tag, 0/1/6/7 only"),
        InitialAgent("proof_solver", "task_agent.baselines.proof_solver",
                     "writes a proof, checks it as a strict grader, refines it within a call budget"),
        InitialAgent("sc_tir", "task_agent.baselines.sc_tir",
                     "self-consistency with tool-integrated reasoning: 8 candidates that run Python, majority vote"),
        InitialAgent("sc_tir_recipe", "task_agent.baselines.sc_tir",
                     "SC-TIR with the NuminaMath recipe's constants: 48 traces at T=0.8, 4 calls of 2048 tokens, "
                     "integer answers mod 1000 (AIMO's, so AIME only)", "RecipeTaskAgent", ("aime2025",)),
        # --preset demo: the default task agent; its meta agent replays meta_agent/demo_script.py when the meta
        # model is the bundled local one (which cannot drive the tool loop), and is the project's otherwise.
        InitialAgent(DEMO, "task_agent.task_agent",
                     "the default task agent, with a meta agent that replays scripted edits under the bundled model",
                     meta_module="meta_agent.replay"),
    )
}


@dataclass(frozen=True)
class AgentFolder:
    """A folder of agent code with the reference's interface: the whole initial code of a run."""

    name: str  # "paper", or the folder's path as given (a project task agent's name when `task_agent` is set)
    path: Path
    about: str
    task_agent: str | None = None  # a file of the folder that becomes its task_agent.py (PAPER_TASK_AGENTS)
    domains: tuple[str, ...] | None = None  # the domains it can do; None: every domain (a generic agent)

    @property
    def bundled(self) -> bool:
        """One of the project's own folders (initial_agents/), named by its name."""
        return self.path.parent == AGENT_FOLDERS.resolve()

    def files(self) -> dict[str, tuple[bool, bytes]]:
        """Its agent code, read as data: regular files of its top-level .py modules, packages and README,
        no link followed, within the workspace quota."""
        snap = read_workspace(self.path, Quota(), only=None)
        keep = {}
        for rel, content in snap.files.items():
            top = rel.split("/", 1)[0]
            if top in NOT_AGENT_CODE or top.startswith((".", "outputs", "venv")) or top.endswith((".png", ".log")):
                continue
            if "/" in rel or top.endswith(".py") or top == "README.md":
                keep[rel] = content
        if self.task_agent is not None:
            keep["task_agent.py"] = snap.files[self.task_agent]
        return keep

    def apply(self, workspace: Path) -> None:
        """Replace the project's agent code in `workspace` with this folder's."""
        for entry in list(workspace.iterdir()):
            discard(entry)
        write_files(workspace, self.files())


def agent_folder(name: str) -> AgentFolder | None:
    """The agent folder `name` stands for (a bundled one's name, or a path), checked; None if it names none."""
    bundled = AGENT_FOLDERS / name
    path = bundled if "/" not in name and bundled.is_dir() else Path(name).expanduser()
    if not path.is_dir():
        return None
    entries = {p.name for p in path.iterdir()}
    missing = [m for m in ("task_agent", "meta_agent") if m not in entries and f"{m}.py" not in entries]
    if missing:
        raise UserError(f"--initial_agent {name}: the folder has no {' and no '.join(missing)} (.py or package): an "
                        "agent folder needs task_agent:TaskAgent and meta_agent:MetaAgent, as the HyperAgents "
                        "reference has them")
    about = ("the HyperAgents reference's generic task agent and one-line meta agent" if path == bundled
             else f"the agent code of {path.resolve()}")
    return AgentFolder(name, path.resolve(), about)


def on_paper(name: str) -> AgentFolder:
    """The paper folder with the project task agent `name` (one of PAPER_TASK_AGENTS) as its task_agent.py."""
    folder = agent_folder(PAPER)
    assert folder is not None, "initial_agents/paper is bundled"
    return AgentFolder(name, folder.path, f"{INITIAL_AGENTS[name].about}, as the reference's task_agent.py, with "
                       "the reference's one-line meta agent and agent code (initial_agents/paper)",
                       PAPER_TASK_AGENTS[name], INITIAL_AGENTS[name].domains)


def paired(name: str, meta_agent: str) -> bool:
    """Whether the run starts from task agent `name` on the paper folder (loop.initial_meta_agent paper)."""
    if meta_agent not in META_AGENTS:
        raise UserError(f"loop.initial_meta_agent is {meta_agent!r}, not one of {', '.join(META_AGENTS)}")
    return meta_agent == PAPER and name in PAPER_TASK_AGENTS


def with_meta_agent(config: Config) -> None:
    """A new run's `models.meta_agent: paper` as the code it starts from: the reference's meta agent is agent
    code, so `paper` is `--initial_agent paper` (the reference's whole folder) for the default task agent,
    and `loop.initial_meta_agent: paper` for a task agent the reference started from. A task agent it never
    started from, or a folder of one's own (which brings its own meta agent: `builtin` runs it), is one line."""
    loop = config.loop
    if config.models.meta_agent != PAPER or loop.initial_agent == PAPER:
        return
    if loop.initial_agent == "default":
        loop.initial_agent = PAPER
    elif loop.initial_agent in PAPER_TASK_AGENTS:
        loop.initial_meta_agent = PAPER
    else:
        raise UserError(f"--meta_agent paper starts from the reference's agent code, which has no version of "
                        f"--initial_agent {loop.initial_agent} (it has: default, {', '.join(PAPER_TASK_AGENTS)}); "
                        "--meta_agent builtin runs the meta agent that initial agent comes with")


def get_initial_agent(name: str, domains: list[str], meta_agent: str = "default") -> InitialAgent | AgentFolder:
    """The named initial agent (or agent folder), after checking it can do every domain of the run;
    `meta_agent` is loop.initial_meta_agent."""
    agent = on_paper(name) if paired(name, meta_agent) else INITIAL_AGENTS.get(name) or agent_folder(name)
    if agent is None:
        bundled = sorted(p.name for p in AGENT_FOLDERS.iterdir() if p.is_dir()) if AGENT_FOLDERS.is_dir() else []
        raise UserError(f"unknown initial agent {name!r} (known: {', '.join(sorted(INITIAL_AGENTS) + bundled)}, "
                        "or the path of an agent folder)")
    if agent.domains is not None:
        unsupported = [d for d in domains if d not in agent.domains]
        if unsupported:
            raise UserError(f"initial agent {name} does not do {', '.join(unsupported)} "
                            f"(it does {', '.join(agent.domains)})")
    return agent


def entry_source(agent: InitialAgent) -> str:
    """`task_agent/__init__.py` for a workspace that starts from `agent`."""
    return (f'"""The task agent the loop evolves. The harness loads `TaskAgent` from here\n'
            f'(initial agent: {agent.name}, {agent.about})."""\n\n'
            f"from {agent.module} import {agent.cls if agent.cls == 'TaskAgent' else agent.cls + ' as TaskAgent'}\n\n"
            f'__all__ = ["TaskAgent"]\n')


def meta_entry_source(agent: InitialAgent) -> str:
    """`meta_agent/__init__.py` for a workspace that starts from `agent`, whose meta agent is its own."""
    return (f'"""The meta agent the loop evolves. The optimizer loads `MetaAgent` from here\n'
            f'(initial agent: {agent.name}, {agent.about})."""\n\n'
            f"from {agent.meta_module} import MetaAgent\n\n"
            f'__all__ = ["MetaAgent"]\n')


def replays_demo(config: Config) -> bool:
    """Whether the run's meta agent replays DEMO_SCRIPT instead of asking a model: the initial agent `demo` with
    only bundled local models as meta models (meta_agent/replay.py)."""
    return config.loop.initial_agent == DEMO and all(is_local(m) for m in config.meta_models())


def plan_text(name: str, meta_agent: str = "default", meta_model: str | None = None) -> str:
    """What the run's plan says of the agent it starts from (`meta_agent`: loop.initial_meta_agent; `meta_model`:
    the meta agent's model, when known)."""
    if name == DEMO and not paired(name, meta_agent):
        if meta_model is None or meta_model == "auto":
            return (f"initial task agent default; meta agent: the project's, except that with the bundled local "
                    f"model as meta model its edits are REPLAYED from {DEMO_SCRIPT}, written in advance by people "
                    "(that model cannot drive the meta agent's tools), then committed, evaluated and recorded like any "
                    "other change")
        if is_local(meta_model):  # meta_agent/replay.py's own test
            return (f"initial task agent default; meta agent: its edits are REPLAYED from {DEMO_SCRIPT}, written in "
                    f"advance by people ({meta_model} cannot drive the meta agent's tools), then committed, "
                    "evaluated and recorded like any other change")
        return (f"initial task agent default, with the project's meta agent (it replays {DEMO_SCRIPT} only with the "
                "bundled local model as meta model)")
    if paired(name, meta_agent):
        return (f"initial task agent {name} as the reference's task_agent.py, with the reference's one-line "
                f"meta agent and agent code (initial_agents/{PAPER}; loop.initial_meta_agent {meta_agent})")
    if name in INITIAL_AGENTS:
        return f"initial task agent {name}, with the project's meta agent (meta_agent/)"
    folder = agent_folder(name)
    return f"initial agents {name}: {folder.about}" if folder and folder.bundled else \
        f"initial agents from the folder {name}"
