"""The task agents a run can start from (`--initial_agent NAME`).

Every workspace carries all of them under `task_agent/baselines/`; the choice is the
one line of `task_agent/__init__.py` that says which module's `TaskAgent` the harness
loads. The meta agent can read the others and switch, as with any other code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.errors import UserError


@dataclass(frozen=True)
class InitialAgent:
    name: str
    module: str  # where its TaskAgent is defined
    domains: tuple[str, ...] | None  # domains it can do; None: all
    about: str

    def apply(self, workspace: Path) -> None:
        """Make this agent the entry point of the task agent in `workspace` (the default already is)."""
        if self.name != "default":
            (workspace / "task_agent" / "__init__.py").write_text(entry_source(self))


INITIAL_AGENTS = {
    a.name: a
    for a in (
        InitialAgent("default", "task_agent.task_agent", None,
                     "one model call per question with a parseable answer format"),
        InitialAgent("proofautograder", "task_agent.baselines.proofautograder", ("imo_grading", "imo_proof_grading"),
                     "IMO-Bench's ProofAutoGrader: rubric, reference, guidelines, <points>N out of 7</points>"),
        InitialAgent("proof_solver", "task_agent.baselines.proof_solver", ("imo_proof",),
                     "writes a proof, checks it as a strict grader, refines it within a call budget"),
        InitialAgent("sc_tir", "task_agent.baselines.sc_tir", ("imo_answer", "aime2025", "amo_bench"),
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
