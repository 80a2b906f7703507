"""The launcher's reading of coding agents' events into the meta transcript (inside/agent_events.py), and the
argv it makes of an agent's command and the workspace's settings (inside/run_coding_agent.py): the shapes of
Claude Code's stream-json, Codex's JSON lines and mini-swe-agent's trajectory, as those programs write them."""

import json

from apps.dashboard import transcript
from inside import agent_events
from inside.run_coding_agent import command_of, flag_items

CLAUDE = [
    {"type": "system", "subtype": "init", "claude_code_version": "2.1.332", "model": "m", "tools": ["Bash"]},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "Reading."},
                                                  {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x.py", "is_error": False}]}},
    {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Edit", "input": {"file": "x.py"}}]}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": [{"type": "text", "text": "no such"}],
                                              "is_error": True}]}},
    {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10, "error_status": 529,
     "error": "overloaded"},
    {"type": "result", "subtype": "error_max_turns", "is_error": True, "result": "", "num_turns": 3},
]
CODEX = [
    {"type": "thread.started", "thread_id": "t"},
    {"type": "item.completed", "item": {"id": "1", "type": "reasoning", "text": "think"}},
    {"type": "item.completed", "item": {"id": "2", "type": "command_execution", "command": "pytest",
                                        "aggregated_output": "1 failed", "exit_code": 1, "status": "failed"}},
    {"type": "item.completed", "item": {"id": "3", "type": "file_change", "status": "completed",
                                        "changes": [{"path": "a.py", "kind": "update"}]}},
    {"type": "item.completed", "item": {"id": "4", "type": "agent_message", "text": "Done."}},
    {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
    {"type": "turn.failed", "error": {"message": "stream disconnected"}},
]
MINI = {"info": {"exit_status": "LimitsExceeded"}, "messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Please solve this issue"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"false\"}"}}]},
    {"role": "tool", "tool_call_id": "c", "content": json.dumps({"returncode": 1, "output": ""})}]}


def reading(markdown: str) -> transcript.Reading:
    return transcript.read(markdown)


def test_claude_codes_stream_reads_as_turns_calls_and_failures():
    text = "".join(agent_events.line("claude-stream-json", json.dumps(e)) for e in CLAUDE)
    seen = reading(text)
    assert seen.calls == {"Bash": 1, "Edit": 1} and seen.replies == 3
    assert [f.what for f in seen.failures] == ["tool call 2 (Edit)", "model call", "model call"]
    assert "overloaded" in seen.failures[1].why and "error_max_turns" in seen.failures[2].why


def test_codexs_events_read_as_turns_calls_and_failures():
    text = "".join(agent_events.line("codex-jsonl", json.dumps(e)) for e in CODEX)
    seen = reading(text)
    assert seen.calls == {"shell": 1, "apply_patch": 1}
    assert [f.why for f in seen.failures] == ["exit status 1", "stream disconnected"]
    assert "Done." in text and "## usage" in text


def test_mini_swe_agents_trajectory_reads_as_turns_calls_and_failures():
    seen = reading(agent_events.mini(MINI))
    assert seen.calls == {"bash": 1}
    assert [f.why for f in seen.failures] == ["exit status 1", "mini-swe-agent ended: LimitsExceeded"]


def test_a_line_that_is_no_event_is_shown_as_it_is_and_pieces_are_cut():
    assert agent_events.line("codex-jsonl", "not json").startswith("## system\n\nnot json")
    assert agent_events.line("codex-jsonl", "[1, 2]") == ""
    huge = agent_events.line("codex-jsonl", json.dumps(
        {"type": "item.completed", "item": {"type": "agent_message", "text": "A" * 10**6}}))
    assert len(huge) < agent_events.MAX_PIECE + 200 and "characters cut" in huge


def test_settings_become_flags_within_bounds():
    spec = {"argv": ["agent", "exec", "{prompt}"], "settings_flags": {"turns": "--max-turns", "effort": "-c effort=",
                                                                       "tools": "--tools", "bad": "--bad"}, "skip": 2}
    settings = {"turns": 10**9, "effort": "high", "tools": ["Bash", "Edit"], "bad": "a\nb", "other": "x"}
    assert command_of(spec, settings, 40, "PROMPT") == ["agent", "exec", "--max-turns", "40", "-c", "effort=high",
                                                        "--tools", "Bash,Edit", "PROMPT"]
    assert flag_items("--x", True, 40) == [] and flag_items("--x", {"a": 1}, 40) == []
    assert flag_items("--x", 0, 40) == ["--x", "1"] and flag_items("--x", "y" * 501, 40) == []


def test_claude_codes_turn_limit_is_a_run_that_ended_well():
    assert agent_events.turns_ran_out("claude-stream-json", json.dumps(CLAUDE[-1]))
    assert not agent_events.turns_ran_out("claude-stream-json", json.dumps({"type": "assistant", "text":
                                                                               "error_max_turns"}))
    assert not agent_events.turns_ran_out("codex-jsonl", json.dumps(CLAUDE[-1]))
