"""ProofAutoGrader, the proof grader of IMO-Bench (Luong et al. 2025, arXiv 2511.01846), as the
HyperAgents reference runs it (facebookresearch/HyperAgents, baselines/imo_grading/proofautograder.py).

IMO-Bench's own repository (google-deepmind/superhuman, imobench/) publishes the data sets, not
the grader; the reference carries its prompt, and two unmerged pull requests to IMO-Bench's
repository (#3, #7) transcribe the same one. Here the prompt is reworded, with the reference's
sections in the reference's order: who grades and how strictly, the 0/1/6/7 scale and what each
score excludes, the four inputs and how to read them, four grading steps, the answer format,
the four inputs, then a request for the reasoning and one of the four score tags.

One model call. The reply is read exactly as the reference reads it:

- the first `<points>` ... `</points>` block (tag names in lower case, the block may span
  lines, and it ends at the first closing tag after the opening one); a later block never counts;
- inside it, the first run of digits (Python's `\\d`, so any script's decimal digits), as an integer:
  "-1 out of 7" reads as 1, "six out of 7" as 7, "5.5" as 5, "07" as 7;
- 0 -> "incorrect", 1 -> "partial", 6 -> "almost", 7 -> "correct"; any other number (2-5 among
  them), a block without digits or no block is an invalid prediction, "None".

A row without one of the four inputs is "None" without a call, as the reference answers it.

The call is sampled as the reference's client sends it (`get_response_from_llm` of its agent/llm.py,
whose defaults the reference's grader keeps): temperature 0 and at most 16,384 output tokens, by its
rules per model name: `openai/gpt-5` and `openai/gpt-5-mini` take only their default temperature, so
they are sent none; a name containing "gpt-5" gets the limit as `max_completion_tokens`; a name
containing "claude-3-haiku" gets at most 4,096. Without them the run's gateway would fill in its own
output cap (gateway.max_output_tokens) and the provider its own temperature.

One addition: a model that the run decodes under a JSON schema (its small local models, see
`agent.llm.needs_constrained_decoding`) cannot write the tag; it answers `{"points": N}` with N
one of 0, 1, 6, 7, read with the same map. That reading applies only to such a model and only
when its reply has no `<points>` block, i.e. where the reference would call every reply invalid.
"""

from __future__ import annotations

import json
import re

from agent.base_agent import AgentSystem
from agent.llm import get_response, needs_constrained_decoding

DOMAINS = ("imo_grading", "imo_proof_grading")
INPUTS = ("problem", "solution", "grading_guidelines", "student_answer")
LABELS = {0: "incorrect", 1: "partial", 6: "almost", 7: "correct"}  # the reference's only valid scores

OPEN, CLOSE = "<points>", "</points>"
_DIGITS = re.compile(r"\d+")

# The reference client's sampling (agent/llm.py there) and its exceptions by model name.
TEMPERATURE = 0.0
MAX_TOKENS = 16384
NO_TEMPERATURE = ("openai/gpt-5", "openai/gpt-5-mini")  # these take their default temperature only
SMALL_OUTPUT = ("claude-3-haiku", 4096)  # a part of a model's name, and the most output tokens it is asked for

# The answer's shape for a model under constrained decoding: it cannot reason to the tag, so it
# picks one of the four scores the prompt offers.
POINTS_SCHEMA = {"type": "object", "properties": {"points": {"type": "integer", "enum": sorted(LABELS)}},
                 "required": ["points"]}


def reference_sampling(model: str) -> dict:
    """The temperature and output limit the reference's client sends for `model`, as chat parameters."""
    params: dict = {} if model in NO_TEMPERATURE else {"temperature": TEMPERATURE}
    if "gpt-5" in model:
        params["max_completion_tokens"] = MAX_TOKENS
    elif SMALL_OUTPUT[0] in model:
        params["max_tokens"] = min(MAX_TOKENS, SMALL_OUTPUT[1])
    else:
        params["max_tokens"] = MAX_TOKENS
    return params


def points_block(text: str) -> str | None:
    """What lies between the first `<points>` and the first `</points>` after it; None without both.

    The same as a lazy, dot-matches-newline regex search for the pair, in linear time: when the
    first opening tag has no closing tag after it, no later opening tag has one either."""
    start = text.find(OPEN)
    if start < 0:
        return None
    end = text.find(CLOSE, start + len(OPEN))
    return None if end < 0 else text[start + len(OPEN):end]


def read_points(text: str) -> int | None:
    """The number the reference reads from a reply: the first digit run of the first points block."""
    block = points_block(text or "")
    found = _DIGITS.search(block) if block is not None else None
    if found is None:
        return None
    try:
        return int(found.group())
    except ValueError:  # more digits than int() takes: the reference's own error, an invalid answer
        return None


def read_json_points(text: str) -> int | None:
    """N of a reply that is the JSON object `{"points": N}` with N an integer; else None."""
    try:
        reply = json.loads(text or "")
    except ValueError:
        return None
    points = reply.get("points") if isinstance(reply, dict) else None
    return points if type(points) is int else None


def points_to_label(points: int | None) -> str | None:
    return LABELS.get(points) if points is not None else None


def parse_points(text: str, constrained: bool = False) -> int | None:
    """The points of a reply: the reference's reading, or for a `constrained` model whose reply
    has no points block, its JSON answer."""
    if constrained and points_block(text or "") is None:
        return read_json_points(text)
    return read_points(text)


def grading_prompt(inputs: dict) -> str:
    return f"""You are grading a proposed solution to a problem from the International Mathematical Olympiad. Grade it the way an IMO coordinator would: strictly, holding it to the competition's very high bar, so that credit goes only to reasoning that is sound, complete and exact.

## How points are awarded
The scale runs from 0 to 7 points, and four scores on it are used:
- 7 points (correct): a complete, fully rigorous solution without errors. Abandoned attempts or wrong turns earlier in the text cost nothing as long as the solution finally given is complete and correct.
- 6 points (almost correct): the central argument is sound and only small slips remain, such as a computational mistake or a minor gap in the logic. A solution that leaves a major part unproved, asserts claims it does not justify or only sketches an argument does not qualify.
- 1 point (partial progress): the solution reaches substantial progress of a kind that the grading guidelines name explicitly. First observations, a restatement of the problem that gets no further, and partial results the guidelines do not name normally do not qualify.
- 0 points (incorrect): the solution makes no substantial progress on a key step of a full solution, or its approach is flawed at the root. Progress that lacks the key results, or lacks rigor, also gets 0.

## What you are given
1. The problem: the olympiad problem itself.
2. A reference solution: take it to be correct; it shows one valid way to solve the problem, not the only one.
3. Grading guidelines for this problem: what earns credit here. Where they and the scale above disagree, above all on partial credit, the guidelines decide.
4. The proposed solution: the submission you grade.

## How to grade
Work through these four steps in order:
1. Study the references: read the problem and the reference solution closely and go through the grading guidelines; work out which steps a complete solution needs and what earns partial credit.
2. Check every step: test every step the proposed solution takes for validity and rigor, and note every flaw, gap, unstated assumption and error. Follow the logic of each step until you understand all of it, and be wary of a solution that only looks correct.
3. Measure the progress: decide how much non-trivial progress the solution makes.
4. Decide the score: hold what you found against the grading guidelines and the scale above, and settle on the final score.

## How to answer
Give the final score as <points>N out of 7</points>. Write that tag a single time in your whole answer: only the first points tag in the answer is read.

**PROBLEM**
{inputs['problem']}

**REFERENCE SOLUTION**
{inputs['solution']}

**GRADING GUIDELINES FOR THIS PROBLEM**
{inputs['grading_guidelines']}

**PROPOSED SOLUTION**
{inputs['student_answer']}

Set out your reasoning in detail and justify the score by the scale and the grading guidelines; then end with your final score, written as exactly one of these four:
<points>7 out of 7</points>
<points>6 out of 7</points>
<points>1 out of 7</points>
<points>0 out of 7</points>
"""


class TaskAgent(AgentSystem):
    def forward(self, inputs: dict):
        domain = inputs.get("domain", "")
        if domain not in DOMAINS:
            # Grading another domain's inputs would only produce garbage labels; fail loudly.
            raise ValueError(f"proofautograder grades {', '.join(DOMAINS)}, not domain {domain!r}")
        missing = [key for key in INPUTS if key not in inputs]
        if missing:
            self.log(f"## prediction\n\nmissing inputs: {', '.join(missing)}\nlabel: None")
            return "None", []
        messages = [{"role": "user", "content": grading_prompt(inputs)}]
        reply = get_response(messages, model=self.model, schema=POINTS_SCHEMA, **reference_sampling(self.model))
        history = messages + [{"role": "assistant", "content": reply.text}]
        self.log_messages(history)

        points = parse_points(reply.text, constrained=needs_constrained_decoding(self.model))
        label = points_to_label(points)
        prediction = label if label is not None else "None"  # "None" marks an invalid prediction
        self.log(f"## prediction\n\npoints: {points}\nlabel: {prediction}")
        return prediction, history
