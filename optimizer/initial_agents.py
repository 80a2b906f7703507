"""The task agents a run can start from (`--initial_agent NAME`).

Every workspace carries all of them under `task_agent/baselines/`; the choice is the
one line of `task_agent/__init__.py` that says which module's `TaskAgent` the harness
loads. The meta agent can read the others and switch, as with any other code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from services.config import PROJECT_ROOT
from services.errors import UserError


@dataclass(frozen=True)
class InitialAgent:
    name: str
    module: str  # where its TaskAgent is defined
    about: str

    @cached_property
    def domains(self) -> tuple[str, ...] | None:
        """The domains it can do (None: all), as its module's `DOMAINS` tuple says: read from the
        source as data, since the core never imports agent code."""
        source = (PROJECT_ROOT / f"{self.module.replace('.', '/')}.py").read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DOMAINS" for t in node.targets):
                return tuple(ast.literal_eval(node.value))
        return None

    def apply(self, workspace: Path) -> None:
        """Make this agent the entry point of the task agent in `workspace` (the default already is)."""
        if self.name != "default":
            (workspace / "task_agent" / "__init__.py").write_text(entry_source(self))


INITIAL_AGENTS = {
    a.name: a
    for a in (
        InitialAgent("default", "task_agent.task_agent", "one model call per question with a parseable answer format"),
        InitialAgent("proofautograder", "task_agent.baselines.proofautograder",
                     "IMO-Bench's ProofAutoGrader: rubric, reference, guidelines, <points>N out of 7</points>"),
        InitialAgent("proof_solver", "task_agent.baselines.proof_solver",
                     "writes a proof, checks it as a strict grader, refines it within a call budget"),
        InitialAgent("sc_tir", "task_agent.baselines.sc_tir",
                     "self-consistency with tool-integrated reasoning: 8 candidates that run Python, majority vote"),
    )
}


def get_initial_agent(name: str, domains: list[str]) -> InitialAgent:
    """The named initial agent, after checking it can do every domain of the run."""
    agent = INITIAL_AGENTS.get(name)
    if agent is None:
        raise UserError(f"unknown initial agent {name!r} (known: {', '.join(sorted(INITIAL_AGENTS))})")
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
            f"from {agent.module} import TaskAgent\n\n"
            f'__all__ = ["TaskAgent"]\n')
