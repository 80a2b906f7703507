"""ProofAutoGrader as the reference's BetterGrader run has it: the reference's
baselines/imo_grading/proofautograder.py as the task agent (task_agent.py) of its agent code.

`--initial_agent proofautograder` with `loop.initial_meta_agent: paper` (the paper preset) copies this
file over initial_agents/paper/task_agent.py; the folder's one-line meta agent, tools and client stay,
as in the reference, which copies the grader over its task_agent.py the same way. Like the reference's
baselines/, this folder is no agent code: a workspace never holds it.

Reproduced:
- one call through the folder's tool loop with no tools, so the message begins with the loop's empty
  preamble and a blank line, sampled at temperature 0 with 16,384 output tokens (agent/llm.py);
- the reply read as the reference reads it: the first `<points>` ... `</points>` block (the tag names in
  lower case, the block may span lines, it ends at the first closing tag after the opening one), the
  first run of digits inside it as an integer, 0/1/6/7 as incorrect/partial/almost/correct; another
  number, a block without digits, no block or an error while reading give "None";
- a row without one of the four inputs gets no prediction (None) and no call.
The prompt is the project's wording of the reference's (task_agent/baselines/proofautograder.py has the
same text), with the reference's sections in its order.
"""

import re

from agent.base_agent import AgentSystem
from agent.tool_chat import chat_with_agent

INPUTS = ("problem", "solution", "grading_guidelines", "student_answer")
LABELS = {0: "incorrect", 1: "partial", 6: "almost", 7: "correct"}
NO_PREDICTION = "None"
OPEN, CLOSE = "<points>", "</points>"
_DIGITS = re.compile(r"\d+")  # any script's decimal digits, which int() reads too


def read_label(reply):
    """The label of a grader's reply, or NO_PREDICTION. The block is what a lazy dot-all regex search for the
    pair finds, found in linear time: when the first opening tag has no closing tag after it, no later one has."""
    start = reply.find(OPEN)
    end = reply.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
    if end < 0:
        return NO_PREDICTION
    digits = _DIGITS.search(reply, start + len(OPEN), end)
    return LABELS.get(int(digits.group()), NO_PREDICTION) if digits else NO_PREDICTION


def grading_prompt(inputs):
    """The grading request for one row: the project's wording of the reference's prompt, in its order."""
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
    def forward(self, inputs):
        """Grade one proof: (its label, the message history)."""
        if not all(key in inputs for key in INPUTS):
            return None, []
        history = chat_with_agent(grading_prompt(inputs), model=self.model, msg_history=[], logging=self.log)
        prediction = NO_PREDICTION
        try:
            prediction = read_label(history[-1].get("text", ""))
        except Exception as e:  # int() refuses a run of digits longer than its limit, as in the reference
            self.log(f"Could not read the points: {e}")
        if prediction == NO_PREDICTION:
            self.log("No score of 0, 1, 6 or 7 points in the first <points> block of the reply.")
        return prediction, history
