"""A proof-writing baseline for `imo_proof`: generate, verify the proof itself, refine.

1. Ask for a complete, rigorous proof.
2. Ask the model, as a strict grader without a reference solution, to check that proof
   step by step and end with `<issues>...</issues>` and `<verdict>pass|fail</verdict>`.
3. On a fail, ask for a corrected complete proof given the issues; go back to 2.

It stops at the first pass or when the call budget is spent, and returns the last proof.
Every refinement is verified, so the budget always ends on a verdict: 1 proof +
MAX_ROUNDS x (refine + verify) + the first verification = MAX_CALLS.

A verification without a readable verdict counts as a fail: passing it would return a
proof nobody checked, while failing it only spends a refinement.
"""

from __future__ import annotations

import re

from agent.base_agent import AgentSystem
from agent.extract import extract_field
from agent.llm import get_response

DOMAINS = ("imo_proof",)
MAX_CALLS = 6  # model calls per problem (get_response calls; its retry on an empty answer is not counted)
MAX_ROUNDS = (MAX_CALLS - 2) // 2  # refinements, each followed by its verification

_VERDICT = re.compile(r"<verdict>\s*(pass|fail)\s*</verdict>", re.I)
_ISSUES = re.compile(r"<issues>(.*?)</issues>", re.S | re.I)
# An unclosed tag is a reply cut off by the token limit; the proof so far is still the best text there is.
# The body may not contain another <proof>, so a tag mentioned in prose before the real one is skipped.
_PROOF = re.compile(r"<proof>((?:(?!<proof>).)*?)(?:</proof>|\Z)", re.S | re.I)


def parse_verdict(text: str) -> bool | None:
    """True for a final `<verdict>pass</verdict>`, False for fail, None when there is none."""
    found = _VERDICT.findall(text or "")
    return found[-1].lower() == "pass" if found else None


def extract_proof(text: str) -> str:
    """The proof in a reply: the last <proof> tag, else a JSON "response" field, else the whole text."""
    tagged = _PROOF.findall(text or "")
    if tagged:
        return tagged[-1].strip()
    value = extract_field(text or "")
    if isinstance(value, str):
        return value.strip()
    return (text or "").strip()


def extract_issues(report: str) -> str:
    """The issues list of a verification report; the whole report when the model left out the tag."""
    found = _ISSUES.findall(report or "")
    return found[-1].strip() if found and found[-1].strip() else (report or "").strip()


_PROOF_FORMAT = "Write the complete proof between <proof> and </proof>, and put nothing else inside the tags."


def prove_prompt(problem: str) -> str:
    return f"""You are a top competition mathematician. Solve the olympiad problem below with a complete and rigorous proof.
If the problem asks for a value or a set, state it clearly and prove both that it works and that nothing else does.
Justify every step, treat every case, and do not rely on unproved claims or on checking small examples.

# Problem
{problem}

{_PROOF_FORMAT}
"""


def verify_prompt(problem: str, proof: str) -> str:
    return f"""You are a strict grader at the International Mathematical Olympiad. There is no reference solution: judge the proof below on its own.

# Problem
{problem}

# Proof to check
{proof}

# Your task
Go through the proof step by step. For each step, decide whether it is correct and fully justified. Look for false claims, gaps, missing cases, circular reasoning, and claims that are stated rather than proved. A proof passes only if it would earn full marks (7 out of 7); cosmetic issues that do not affect correctness are not failures.

End your reply with the list of issues you found (write "none" if there are none) and your verdict, in this form:
<issues>
- ...
</issues>
<verdict>pass</verdict> or <verdict>fail</verdict>
"""


def refine_prompt(problem: str, proof: str, issues: str) -> str:
    return f"""You are a top competition mathematician. A strict grader found problems in the proof below.

# Problem
{problem}

# Previous proof
{proof}

# Issues found by the grader
{issues}

# Your task
Write a corrected proof that fixes every valid issue. If an issue shows that the approach cannot work, start again with a different approach. The new proof must be complete and self-contained: it replaces the previous one, so do not refer to it.

{_PROOF_FORMAT}
"""


class TaskAgent(AgentSystem):
    def forward(self, inputs: dict):
        domain = inputs.get("domain", "")
        if domain not in DOMAINS:
            raise ValueError(f"proof_solver writes proofs for {', '.join(DOMAINS)}, not domain {domain!r}")
        problem = inputs.get("problem", "")
        history: list[dict] = []

        proof = extract_proof(self._ask(prove_prompt(problem), history))
        for round_ in range(MAX_ROUNDS + 1):
            report = self._ask(verify_prompt(problem, proof), history)
            verdict = parse_verdict(report)
            self.log(f"## verdict\n\n{verdict}")
            if verdict is True or round_ == MAX_ROUNDS:
                break
            refined = extract_proof(self._ask(refine_prompt(problem, proof, extract_issues(report)), history))
            # An empty refinement (refusal, cut-off reply) must not replace a proof that has content.
            if refined:
                proof = refined

        prediction = proof or "None"  # "None" marks an invalid prediction
        self.log(f"## prediction\n\n{prediction}")
        return prediction, history

    def _ask(self, prompt: str, history: list[dict]) -> str:
        """One fresh single-turn call; the exchange is appended to `history` and the transcript."""
        messages = [{"role": "user", "content": prompt}]
        reply = get_response(messages, model=self.model)
        exchange = messages + [{"role": "assistant", "content": reply.text}]
        history.extend(exchange)
        self.log_messages(exchange)
        return reply.text
