"""The initial meta agent: one tool-using conversation that edits the agent code of a workspace.

Contract: `MetaAgent(model, chat_history_file)`; `forward(repo_path, eval_path, ...)` edits the
files under `repo_path` in place. The optimizer takes the resulting diff; the return value is only
the transcript.
"""

from __future__ import annotations

from agent.base_agent import AgentSystem
from agent.llm import Usage
from agent.tool_loop import chat_with_tools
from agent.tools import bash, editor


def instruction(repo_path: str, eval_path: str, iterations_left: int | None, try_command: str | None,
                other_parent: str | None = None, other_node: str | None = None) -> str:
    parts = [f"""You improve an AI agent system by editing its code. The repository is at {repo_path}:
- task_agent/: the task agent. `TaskAgent(model, chat_history_file).forward(inputs)` answers one task \
(`inputs["domain"]` names the domain) and returns (prediction, message history); its predictions are scored.
- meta_agent/: the meta agent, which is you: it writes this prompt and runs the tool loop. Later generations \
start from your version of it, so improving it improves every later edit.
- agent/: code both use: LLM client (llm.py), answer extraction (extract.py), tool loop (tool_loop.py), \
tools (tools/).

Modify any part of the codebase at {repo_path} to improve the task agent's score. Keep both entry points \
and their signatures working. Agent code may import only the Python standard library, litellm and the \
repository's own packages, and reaches models only through agent/llm.py.

Earlier generations' results on the train split are in {eval_path} (read-only; empty before the first \
evaluation): a folder per generation (node) and domain, each with report.json (metrics) and \
predictions.csv (one row per question, the agent's prediction next to the label). \
`find {eval_path} -name report.json` lists them; study the rows whose prediction misses the label to \
find what to fix. The bash shell starts in {repo_path}."""]
    if other_parent:
        parts.append(f"""This is a merge. A second version of the agent, from another line of the search, is at \
{other_parent} (read-only; node {other_node}, its train results under {eval_path}/{other_node}). Each of the two \
versions gets right some questions the other gets wrong. Compare their code and their results, then bring what \
makes the other version succeed into the code at {repo_path} without losing what this one already does well.""")
    if iterations_left is not None:
        parts.append(f"Iterations left in this run: {iterations_left}.")
    if try_command:
        parts.append(f"`{try_command}` runs the current task agent in {repo_path} on train rows and prints "
                     "its score. Test every change with it before you finish: a task agent that fails to run "
                     "scores zero.")
    parts.append("When you are done, reply with a short summary of what you changed and why, without a tool call.")
    return "\n\n".join(parts)


class MetaAgent(AgentSystem):
    def forward(
        self,
        repo_path: str,
        eval_path: str,
        iterations_left: int | None = None,
        try_command: str | None = None,
        max_tool_calls: int = 40,
        other_parent: str | None = None,
        other_node: str | None = None,
    ) -> list[dict]:
        prompt = instruction(repo_path, eval_path, iterations_left, try_command, other_parent, other_node)
        messages, usage = self.edit(prompt, repo_path, max_tool_calls)
        self.log(f"## usage\n\n{usage.calls} model calls, {usage.prompt_tokens} prompt tokens, "
                 f"{usage.completion_tokens} completion tokens")
        return messages

    def edit(self, prompt: str, repo_path: str, max_tool_calls: int) -> tuple[list[dict], Usage]:
        """The tool loop on `prompt`, its tools (bash, the editor) working in `repo_path`: (messages, usage)."""
        bash.reset(cwd=repo_path)
        editor.reset()
        try:
            return chat_with_tools(
                [{"role": "user", "content": prompt}], model=self.model, tools=[bash, editor],
                max_tool_calls=max_tool_calls, log=self.log, temperature=0.0,
            )
        finally:
            bash.close()  # background jobs it started must not outlive the generation
