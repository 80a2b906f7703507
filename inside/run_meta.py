"""Run the workspace's meta agent once, inside the sandbox.

    python run_meta.py --repo /workspace --eval_path /feedback --iterations_left 3 \
        --model M --transcript /out/meta_chat_history.md [--try_command "..."] \
        [--other_parent /other_parent --other_node N]

It imports `MetaAgent` from the workspace (the agent may have rewritten it), or from
`--agent_root` when the meta agent is frozen, and nothing from the trusted core. Exit 0
when `forward` returned; 3 when the
meta agent cannot be loaded; 4 when it raised. Once `forward` returned, its last line on stdout
says how many tool calls the conversation it returned holds and how many of those could not be
read (SUMMARY): agent code wrote that conversation, so the line is a claim the host reads as
hostile data, and only ever to tell a meta agent that changed nothing why.
"""

import argparse
import inspect
import json
import os
import sys
import traceback


def accepted(method, **extras) -> dict:
    """The `extras` that `method` takes: the reference's interface is forward(repo_path, eval_path,
    iterations_left); this project's meta agents also take the try command, their tool-call cap and, in a
    merge, the second parent (a meta agent that takes no other_parent makes an ordinary change)."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return extras
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return {k: v for k, v in extras.items() if v is not None}
    return {k: v for k, v in extras.items() if k in params and v is not None}


SUMMARY = "hyperagents-meta-summary: "  # the start of the line with the counts
# What agent/tool_loop.py answers a tool call it could not run as asked.
MALFORMED = ("Error: the tool call could not be read", "Error: the tool call's arguments are not valid JSON",
             "Error: there is no tool ", "Error: `tool_input` must be a JSON object")


def tool_calls(messages) -> tuple[int, int]:
    """(tool calls, malformed ones) of a conversation as agent/tool_loop.py returns it: each call's
    result is a user message "Tool result:\n..." (a "tool" message for native calls)."""
    calls = malformed = 0
    for message in messages if type(messages) is list else []:
        content = message.get("content") if type(message) is dict else None
        if type(content) is not str:
            continue
        if message.get("role") == "user" and content.startswith("Tool result:\n"):
            content = content.removeprefix("Tool result:\n")
        elif message.get("role") != "tool":
            continue
        calls += 1
        malformed += content.startswith(MALFORMED)
    return calls, malformed


def read_summary(stdout: str) -> dict | None:
    """The counts of the last summary line of `stdout` (printed by agent code too: checked), or None."""
    for line in reversed(stdout[-4000:].splitlines()):
        if line.startswith(SUMMARY):
            try:
                counts = json.loads(line.removeprefix(SUMMARY)[:200])
            except (ValueError, RecursionError):
                return None
            keys = ("tool_calls", "malformed")
            if type(counts) is dict and all(type(counts.get(k)) is int and counts[k] >= 0 for k in keys):
                return {k: counts[k] for k in keys}
            return None
    return None


def print_summary(messages) -> None:
    try:
        calls, malformed = tool_calls(messages)
        os.write(1, f"\n{SUMMARY}{json.dumps({'tool_calls': calls, 'malformed': malformed})}\n".encode())
    except BaseException:  # whatever the agent's conversation holds, the run itself succeeded
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--eval_path", required=True)
    ap.add_argument("--iterations_left", type=int, default=None)
    ap.add_argument("--model", required=True)
    ap.add_argument("--transcript", required=True)
    ap.add_argument("--try_command", default=None)
    ap.add_argument("--max_tool_calls", type=int, default=40)
    ap.add_argument("--other_parent", default=None, help="a merge: the second parent's code, read-only")
    ap.add_argument("--other_node", default=None, help="a merge: the second parent's node id")
    ap.add_argument("--agent_root", default=None,
                    help="where the meta agent's own code is, if not in --repo (a frozen copy, for a baseline)")
    args = ap.parse_args()
    from route import route_on_import  # mounted beside this file

    route_on_import()  # a meta agent that calls a provider's model with litellm still reaches the gateway
    sys.path.insert(0, args.agent_root or args.repo)
    try:
        from meta_agent import MetaAgent
    except BaseException:
        traceback.print_exc()
        return 3
    try:
        agent = MetaAgent(model=args.model, chat_history_file=args.transcript)
        messages = agent.forward(repo_path=args.repo, eval_path=args.eval_path, iterations_left=args.iterations_left,
                                 **accepted(agent.forward, try_command=args.try_command,
                                            max_tool_calls=args.max_tool_calls, other_parent=args.other_parent,
                                            other_node=args.other_node))
    except BaseException:
        traceback.print_exc()
        return 4
    print_summary(messages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
