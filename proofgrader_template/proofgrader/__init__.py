"""proofgrader: an IMO proof grader packaged by setup_proofgrader_repo (see README.md).

`grade(...)` is the short way in; `proofgrader.task_agent.TaskAgent` is the agent with
the framework's task-agent contract. The model a call uses is `model=`, else the environment's
PROOFGRADER_MODEL, else `DEFAULT_MODEL`: the build's default, None when the grader's own model is
one only a run of the framework serves (its bundled local model); README.md says which.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PROVENANCE = json.loads((Path(__file__).parent / "provenance.json").read_text())
DEFAULT_MODEL = PROVENANCE["default_model"]
MODEL_VARIABLE = "PROOFGRADER_MODEL"
LABELS = ("incorrect", "partial", "almost", "correct")


def model_for(model: str | None = None) -> str:
    """The model a call uses: `model`, else $PROOFGRADER_MODEL, else DEFAULT_MODEL; ValueError when none is set."""
    chosen = model or os.environ.get(MODEL_VARIABLE) or DEFAULT_MODEL
    if not chosen:
        raise ValueError(f"this grader has no default model ({PROVENANCE['model']}, which it was built with, is served "
                         f"only inside a run of the framework): pass model= or set {MODEL_VARIABLE} to a litellm "
                         "model string, e.g. openai/o4-mini")
    return chosen


def grade(problem: str, solution: str, grading_guidelines: str, student_answer: str,
          model: str | None = None, chat_history_file: str | None = None) -> str:
    """One of LABELS for `student_answer`, or "None" when the grader's answer could not be read."""
    from proofgrader.task_agent import TaskAgent

    inputs = {"domain": "imo_proof_grading", "problem": problem, "solution": solution,
              "grading_guidelines": grading_guidelines, "student_answer": student_answer}
    prediction, _ = TaskAgent(model=model, chat_history_file=chat_history_file).forward(inputs)
    return prediction
