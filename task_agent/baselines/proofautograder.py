"""ProofAutoGrader, the proof-grading baseline of IMO-Bench (Luong et al. 2025).

One model call: the grader sees the general IMO 7-point rubric, the problem, a reference
solution, the problem-specific grading guidelines and the proposed solution, verifies the
proposed solution step by step, and ends with `<points>N out of 7</points>`.

The grading domains score four labels, not points, so the points are bucketed:

    7    -> "correct"    complete and rigorous
    5-6  -> "almost"     the rubric's 6; a 5 is still much nearer "minor errors" than
                         "substantial progress"
    1-4  -> "partial"    the rubric's 1; 2-4 mean more progress, but still not a proof
    0    -> "incorrect"  no substantial progress

The rubric only names 7, 6, 1 and 0, but models do answer with the other values; each
is put in the label whose rubric description it is closest to, rather than dropped.
A reply without a well-formed points tag is an invalid prediction ("None"), not a guess.
Small local models, which answer under constrained decoding, reply `{"points": N}` instead.
"""

from __future__ import annotations

import json
import re

from agent.base_agent import AgentSystem
from agent.llm import get_response

DOMAINS = ("imo_grading", "imo_proof_grading")

# A signed integer is still "well formed" so that an out-of-range final answer (8, -1)
# invalidates the prediction instead of letting an earlier tag win.
_POINTS = re.compile(r"<points>\s*([+-]?\d+)\s+out\s+of\s+7\s*</points>", re.I)


# The answer's shape for models that only answer well under constrained decoding (small local
# ones, see agent/llm.py): they reply with this JSON object instead of reasoning to a tag.
POINTS_SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "minimum": 0, "maximum": 7}},
                 "required": ["points"]}


def parse_points(text: str) -> int | None:
    """Points in the last well-formed `<points>N out of 7</points>` tag, or in a bare
    `{"points": N}` reply (constrained decoding); None if absent or not in 0..7."""
    found = _POINTS.findall(text or "")
    if found:
        points = int(found[-1])
    else:
        try:
            reply = json.loads(text or "")
            points = reply["points"] if isinstance(reply, dict) and type(reply.get("points")) is int else None
        except ValueError:
            points = None
    return points if points is not None and 0 <= points <= 7 else None


def points_to_label(points: int | None) -> str | None:
    """The grading label for a 0..7 score (see the module docstring for why these buckets)."""
    if points is None:
        return None
    if points == 7:
        return "correct"
    if points >= 5:
        return "almost"
    if points >= 1:
        return "partial"
    return "incorrect"


def grading_prompt(inputs: dict) -> str:
    return f"""You are grading a proposed solution to an International Mathematical Olympiad problem.

# General rubric (IMO 7-point scale)
- 7 points: the solution is complete and rigorous.
- 6 points: the solution is almost complete; it has only minor errors or omissions that are easily fixed.
- 1 point: the solution makes substantial progress, as defined by the grading guidelines below, but is far from complete.
- 0 points: anything else, including a correct answer without a valid justification.

The grading guidelines below are written for this specific problem. Where they differ from the general rubric, follow the grading guidelines.

# Problem
{inputs.get("problem", "")}

# Reference solution
{inputs.get("solution", "")}

# Grading guidelines
{inputs.get("grading_guidelines", "")}

# Proposed solution
{inputs.get("student_answer", "")}

# Your task
Verify the proposed solution step by step. For each step, decide whether it is correct and fully justified; note every error, gap and unproved claim, and how much it matters. The proposed solution may take a different route from the reference solution; judge it on its own merits. Then compare what it achieves with the grading guidelines and the rubric.

Finish with exactly one final line in this form, where N is an integer from 0 to 7:
<points>N out of 7</points>
"""


class TaskAgent(AgentSystem):
    def forward(self, inputs: dict):
        domain = inputs.get("domain", "")
        if domain not in DOMAINS:
            # Grading another domain's inputs would only produce garbage labels; fail loudly.
            raise ValueError(f"proofautograder grades {', '.join(DOMAINS)}, not domain {domain!r}")
        messages = [{"role": "user", "content": grading_prompt(inputs)}]
        reply = get_response(messages, model=self.model, schema=POINTS_SCHEMA)
        history = messages + [{"role": "assistant", "content": reply.text}]
        self.log_messages(history)

        points = parse_points(reply.text)
        label = points_to_label(points)
        prediction = label if label is not None else "None"  # "None" marks an invalid prediction
        self.log(f"## prediction\n\npoints: {points}\nlabel: {prediction}")
        return prediction, history
