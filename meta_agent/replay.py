"""The meta agent's replay mode: scripted edits instead of a model's, for the no-key demo (`--preset demo`).

The bundled local model (local/smollm2-135m, 135M parameters) cannot drive the meta agent's tool loop:
its tool calls are unreadable, and every generation ends with no change. So that a run with no provider
key still shows the loop at work, this meta agent does not ask that model: it replays the edits of
meta_agent/demo_script.py, written in advance by people, through the project's own tool loop and tools
(agent/tool_loop.py, agent/tools/): each reply the model would have given comes from the script, each
tool call in it runs for real in the workspace (the edits, an import check, the try command), and the
transcript is written as always. The loop then captures, commits, evaluates and records the change like
any other; only who wrote it differs, and every reply says so.

With any other meta model (a provider's, when a key is set) it is the project's meta agent, unchanged.
A run uses it when it starts from the initial agent `demo` (optimizer/initial_agents.py), which makes
this module the meta agent's entry point (meta_agent/__init__.py); the workspace carries it on from there.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent import tool_loop
from agent.llm import LLMReply
from meta_agent.demo_script import STEPS
from meta_agent.meta_agent import MetaAgent as ProjectMetaAgent
from meta_agent.meta_agent import instruction

SCRIPT = "meta_agent/demo_script.py"
REPLAYED = f"[replayed from {SCRIPT}: written in advance by people, not by a model]"
BUNDLED_PREFIX = "local/"  # the bundled local models (services/local_model.py)


def replays(model: str) -> bool:
    """Whether the meta agent with `model` replays the script: only with a bundled local model."""
    return model.startswith(BUNDLED_PREFIX)


def next_step(repo_path: str) -> tuple[int, dict] | None:
    """(number, step) of the first step of the script the workspace lacks; None when it has them all."""
    for number, step in enumerate(STEPS, 1):
        target = Path(repo_path) / step["edits"][0]["path"]
        text = target.read_text(encoding="utf-8") if target.is_file() else ""
        if step["marker"] not in text:
            return number, step
    return None


def applies(repo_path: str, step: dict) -> str | None:
    """Why the step's edits do not apply to the workspace as it is (each `old_str` once, in turn); None if they do."""
    texts: dict[str, str] = {}
    for edit in step["edits"]:
        path = Path(repo_path) / edit["path"]
        if edit["path"] not in texts:
            texts[edit["path"]] = path.read_text(encoding="utf-8") if path.is_file() else ""
        found = texts[edit["path"]].count(edit["old_str"])
        if found != 1:
            return f"{edit['path']} has the text an edit replaces {found} times, not once (the file changed since the script was written)"
        texts[edit["path"]] = texts[edit["path"]].replace(edit["old_str"], edit["new_str"])
    return None


def tool_call(say: str, name: str, tool_input: dict) -> str:
    """A reply in the tool loop's text protocol: a sentence, then one tool call."""
    return f"{say}\n<json>\n{json.dumps({'tool_name': name, 'tool_input': tool_input})}\n</json>"


def script_replies(repo_path: str, number: int, step: dict, try_command: str | None, max_tool_calls: int) -> list[str]:
    """The replies of one step: its edits, then, as far as `max_tool_calls` allows, an import check and the
    try command, then the summary."""
    head = f"{REPLAYED} Step {number} of {len(STEPS)}: {step['title']}."
    replies = [tool_call(f"{head} {step['why']}" if i == 0 else f"{head} Edit {i + 1} of {len(step['edits'])}.",
                         "editor", {"command": "str_replace", "path": str(Path(repo_path) / edit["path"]),
                                    "old_str": edit["old_str"], "new_str": edit["new_str"]})
               for i, edit in enumerate(step["edits"])]
    checks = [tool_call(f"{head} Both entry points must still import.", "bash",
                        {"command": "python -c 'import task_agent, meta_agent; print(\"imports ok\")'"})]
    if try_command:
        checks.append(tool_call(f"{head} The changed task agent on train rows.", "bash",
                                {"command": try_command, "timeout": 600}))
    replies += checks[:max(0, max_tool_calls - len(replies))]
    return replies + [f"{head} Changed {step['edits'][0]['path']}: {step['why']}"]


class Scripted:
    """Stands in for the model in the tool loop (agent.llm.get_response's signature): each call returns
    the script's next reply, whatever the messages. A tool call that failed ends the replay, saying so."""

    def __init__(self, replies: list[str]):
        self.replies = replies
        self.given = 0

    def __call__(self, messages: list[dict], model: str, temperature: float | None = None,
                 max_tokens: int | None = None, schema: dict | None = None, **params) -> LLMReply:
        last = str(messages[-1].get("content") or "") if messages else ""
        if self.given and last.startswith("Tool result:\nError"):
            self.given = len(self.replies)
            return LLMReply(f"{REPLAYED} The scripted tool call failed (see its result above): the replay stops here.")
        reply = self.replies[min(self.given, len(self.replies) - 1)]
        self.given += 1
        return LLMReply(reply)


class MetaAgent(ProjectMetaAgent):
    """The project's meta agent, which replays meta_agent/demo_script.py when its model is a bundled local one."""

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
        if not replays(self.model):
            return super().forward(repo_path, eval_path, iterations_left, try_command, max_tool_calls,
                                   other_parent, other_node)
        found = next_step(repo_path)
        why_not = None if found is None else applies(repo_path, found[1])
        if found is not None and not why_not and len(found[1]["edits"]) > max_tool_calls:
            why_not = f"its {len(found[1]['edits'])} edits are more than the {max_tool_calls} tool calls allowed"
        if found is None or why_not:
            why = (f"every step of {SCRIPT} is in this workspace already" if found is None else
                   f"step {found[0]} of {SCRIPT} does not apply: {why_not}")
            text = f"{REPLAYED} Nothing to replay: {why}. No change."
            self.log(f"## replay\n\n{text}")
            return [{"role": "assistant", "content": text}]
        number, step = found
        self.log(f"## replay\n\nThe meta model {self.model} is the bundled local model, which cannot drive this "
                 f"tool loop; this run replays step {number} of {len(STEPS)} of {SCRIPT} instead, through the same "
                 "tool loop and tools. Every reply below comes from that script, not from a model.")
        prompt = instruction(repo_path, eval_path, iterations_left, try_command, other_parent, other_node)
        scripted = Scripted(script_replies(repo_path, number, step, try_command, max_tool_calls))
        model_call = tool_loop.get_response
        tool_loop.get_response = scripted  # this process is the meta agent's own, and it ends with this run
        try:
            messages, _ = self.edit(prompt, repo_path, max_tool_calls)
        finally:
            tool_loop.get_response = model_call
        self.log(f"## usage\n\n0 model calls: {scripted.given} replies replayed from {SCRIPT}")
        return messages
