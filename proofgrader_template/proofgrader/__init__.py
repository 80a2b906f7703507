"""proofgrader: an IMO proof grader packaged by setup_proofgrader_repo (see README.md).

`grade(...)` is the short way in; `proofgrader.task_agent.TaskAgent` is the agent with
the framework's task-agent contract. `DEFAULT_MODEL` is the model it was evaluated with.
"""

from __future__ import annotations

import json
from pathlib import Path

PROVENANCE = json.loads((Path(__file__).parent / "provenance.json").read_text())
DEFAULT_MODEL = PROVENANCE["model"]
LABELS = ("incorrect", "partial", "almost", "correct")


def grade(problem: str, solution: str, grading_guidelines: str, student_answer: str,
          model: str | None = None, chat_history_file: str | None = None) -> str:
    """One of LABELS for `student_answer`, or "None" when the grader's answer could not be read."""
    from proofgrader.task_agent import TaskAgent

    inputs = {"domain": "imo_proof_grading", "problem": problem, "solution": solution,
              "grading_guidelines": grading_guidelines, "student_answer": student_answer}
    prediction, _ = TaskAgent(model=model, chat_history_file=chat_history_file).forward(inputs)
    return prediction
