"""The initial task agent: one model call per question, with an answer format it can parse.

Contract (the same as the HyperAgents seed): `TaskAgent(model, chat_history_file)`;
`forward(inputs) -> (prediction, message_history)`. `inputs["domain"]` says what the
task is; the other keys are that domain's inputs, never its labels.
"""

from __future__ import annotations

from agent.base_agent import AgentSystem
from agent.extract import extract_field, extract_label
from agent.llm import get_response

GRADES = ["incorrect", "partial", "almost", "correct"]

_ANSWER_FORMAT = """Give your answer as JSON of this shape:
<json>
{{
    "response": {schema}
}}
</json>"""
# Where the answer is free text, the format is said in words, never shown with a placeholder value: a
# small model (the bundled local one) copies a placeholder such as "your final answer" word for word.
_FREE_FORMAT = """Give your answer as JSON with one key, "response", whose value is {what}, \
between <json> and </json> tags."""
# A task of the user's own: a sentence of reasoning, then the answer alone, shown after one filled
# example of the exchange, so the model sees the format with a real answer in it (the bundled local
# model, shown the format alone, answered none of examples/capitals; with the example, a third).
_GENERIC_FORMAT = """Give your answer as JSON with two keys, between <json> and </json> tags: "reasoning", \
one short sentence that answers the task, then "response", the final answer alone, exactly as it should be checked."""
EXAMPLE_INPUTS = {"question": "What is the chemical symbol of gold?"}
EXAMPLE_REPLY = '<json>\n{"reasoning": "The chemical symbol of gold is Au.", "response": "Au"}\n</json>'
# What a model that copies the format instead of answering returns (lower case, no quotes or final dot):
# never an answer, so the agent predicts nothing rather than this.
PLACEHOLDERS = {"your final answer", "your answer", "final answer", "the final answer", "answer", "response",
                "your complete proof", "your proof", "...", "…", "<answer>", "answer here", "your answer here"}


def grading_instruction(inputs: dict) -> str:
    return f"""You are an expert grader of International Mathematical Olympiad (IMO) proofs.

Grade the student's answer to the problem below on the IMO 7-point scale, then report it as one of four labels:
- "correct" (7 points): a complete, rigorous proof;
- "almost" (6 points): essentially correct, with minor mistakes or omissions only;
- "partial" (1 point): substantial progress as described in the grading guidelines, but far from complete;
- "incorrect" (0 points): no substantial progress, or a fundamentally flawed argument.

The grading guidelines are specific to this problem and take precedence over the general scale.
Check every step of the student's answer; a confident tone or a correct final answer does not make a proof correct.

## Problem
{inputs.get("problem", "")}

## Reference solution
{inputs.get("solution", "")}

## Grading guidelines
{inputs.get("grading_guidelines", "")}

## Student's answer
{inputs.get("student_answer", "")}

Think the verification through first. Then give your final label.
""" + _ANSWER_FORMAT.format(schema='"incorrect" | "partial" | "almost" | "correct"')


def proof_instruction(inputs: dict) -> str:
    return f"""You are a world-class competition mathematician. Write a complete and rigorous proof for the problem below.
State the answer clearly if the problem asks for one, justify every step, and do not skip cases.

## Problem
{inputs.get("problem", "")}

Put the whole proof, as it should be graded, in the "response" field.
""" + _FREE_FORMAT.format(what="the whole proof, as one string")


def answer_instruction(inputs: dict) -> str:
    return f"""You are a world-class competition mathematician. Solve the problem below.
Reason step by step and check your work. The problem has a short final answer (a number, a set, an expression or a short statement).

## Problem
{inputs.get("problem", "")}

Put only the final answer, in LaTeX, in the "response" field.
""" + _FREE_FORMAT.format(what="the final answer alone, in LaTeX")


def generic_instruction(inputs: dict) -> str:
    """Any other domain (one of the user's own, defined by a spec file): its inputs as labeled fields."""
    fields = "\n\n".join(f"## {key.replace('_', ' ').capitalize()}\n{value}"
                          for key, value in inputs.items() if key != "domain")
    return f"""You are an expert working on a task of the kind "{inputs.get("domain", "")}".
Answer it from the input below. Think it through first; then give only the final answer, exactly as it should be checked.

{fields}

""" + _GENERIC_FORMAT


def example_exchange(domain: str) -> list[dict]:
    """One filled example of a task of the user's own and its answer, as the turns before the task."""
    return [{"role": "user", "content": generic_instruction({"domain": "example", **EXAMPLE_INPUTS})},
            {"role": "assistant", "content": EXAMPLE_REPLY}] if domain not in INSTRUCTIONS else []


def copies_format(value: object) -> bool:
    """Whether an extracted answer is only a copy of the answer format's words (a placeholder), not an answer."""
    bare = value.strip().strip("\"'`*").strip().lower() if isinstance(value, str) else None
    return bare is not None and (bare in PLACEHOLDERS or bare.rstrip(".") in PLACEHOLDERS)


def answer_schema(values: list[str] | None = None, reasoning: bool = False) -> dict:
    """The JSON shape of an answer, {"response": ...} (after "reasoning" when asked), for models that need
    it enforced."""
    response = {"type": "string", "enum": values} if values else {"type": "string"}
    keys = {"reasoning": {"type": "string"}} if reasoning else {}
    return {"type": "object", "properties": {**keys, "response": response}, "required": [*keys, "response"]}


INSTRUCTIONS = {
    "imo_grading": grading_instruction,
    "imo_proof_grading": grading_instruction,
    "imo_proof": proof_instruction,
    "imo_answer": answer_instruction,
    "aime2025": answer_instruction,
    "amo_bench": answer_instruction,
}
LABELS = {"imo_grading": GRADES, "imo_proof_grading": GRADES}


class TaskAgent(AgentSystem):
    def forward(self, inputs: dict):
        domain = inputs.get("domain", "")
        instruction = INSTRUCTIONS.get(domain, generic_instruction)(inputs)
        messages = example_exchange(domain) + [{"role": "user", "content": instruction}]
        schema = answer_schema(LABELS.get(domain), reasoning=domain not in INSTRUCTIONS)
        reply = get_response(messages, model=self.model, schema=schema)
        history = messages + [{"role": "assistant", "content": reply.text}]
        self.log_messages(history)

        if domain in LABELS:
            prediction = extract_label(reply.text, LABELS[domain])
        else:
            value = extract_field(reply.text)
            # A proof that did not come back as JSON is still a proof: keep the text.
            prediction = value if value is not None else reply.text.strip()
        if prediction in (None, "") or copies_format(prediction):
            prediction = "None"  # a copied placeholder is no answer
        prediction = str(prediction)
        self.log(f"## prediction\n\n{prediction}")
        return prediction, history
