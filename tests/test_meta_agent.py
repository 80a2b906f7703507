"""The meta agent's tools, the tool loop and the meta agent, with litellm talking to a real fake server."""

import json
import time
import uuid
from pathlib import Path

import pytest

from agent.base_agent import AgentSystem
from agent.tool_loop import chat_with_tools
from agent.tools import bash, editor
from meta_agent import MetaAgent
from support.fake_openai import FakeOpenAI

MODEL = "openai/fake"


@pytest.fixture(autouse=True)
def fresh_tools():
    bash.reset()
    editor.reset()
    yield
    bash.close()
    editor.reset()


def call(tool_name: str, **tool_input) -> str:
    return f"Let me do this.\n<json>\n{json.dumps({'tool_name': tool_name, 'tool_input': tool_input})}\n</json>"


def sent_messages(fake, index: int) -> list[dict]:
    return fake.requests[index]["json"]["messages"]


# -- bash ------------------------------------------------------------------------------------


def test_bash_keeps_directory_and_variables_across_calls(tmp_path):
    assert bash.run({"command": f"cd {tmp_path} && export GREETING=hello"}) == "(no output)\n[exit status 0]"
    assert bash.run({"command": "pwd; echo $GREETING"}) == f"{tmp_path}\nhello\n[exit status 0]"


def test_bash_reports_exit_status_and_survives_exit_and_syntax_errors():
    assert bash.run({"command": "echo out; echo err >&2; (exit 7)"}) == "out\nerr\n[exit status 7]"
    started = time.monotonic()
    assert "[exit status 2]" in bash.run({"command": "echo 'unbalanced"})
    assert time.monotonic() - started < 5  # a quoting mistake must not wait for the timeout
    assert "the shell exited with status 3" in bash.run({"command": "X=1; exit 3"})
    assert bash.run({"command": "echo ${X:-unset}"}) == "unset\n[exit status 0]"


def test_bash_timeout_kills_the_command_and_the_next_call_works(tmp_path):
    pid_file = tmp_path / "pid"
    bash.run({"command": "export KEPT=before"})
    started = time.monotonic()
    result = bash.run({"command": f"echo started; sleep 100 & echo $! > {pid_file}; wait", "timeout": 1})
    assert time.monotonic() - started < 10
    assert result.startswith("started\n") and "[timed out after 1 s" in result and "restarted" in result
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "sleep 100 survived the timeout"
        time.sleep(0.05)
    assert bash.run({"command": "echo again ${KEPT:-reset}"}) == "again reset\n[exit status 0]"


def test_bash_truncation_keeps_head_and_tail_with_the_cut_size():
    full = "".join(f"{n}\n" for n in range(1, 20001))
    result = bash.run({"command": "seq 1 20000"})
    assert result.startswith("1\n2\n3\n") and result.endswith("19999\n20000\n[exit status 0]")
    assert f"[... {len(full) - 10_000} characters cut from the middle ...]" in result
    assert len(result) < 10_200


def test_bash_flood_is_bounded_and_the_marker_counts_everything_cut():
    result = bash.run({"command": "yes | head -c 5000000"})
    assert "[... 4990000 characters cut from the middle ...]" in result and len(result) < 10_200


def test_bash_bad_input_is_an_error_text():
    assert bash.run({}).startswith("Error:")
    assert bash.run({"command": "echo", "timeout": -1}).startswith("Error:")


# -- editor ----------------------------------------------------------------------------------


def test_editor_create_and_view(tmp_path):
    path = tmp_path / "pkg" / "mod.py"
    assert editor.run({"command": "create", "path": str(path), "file_text": "one\ntwo\nthree\n"}) \
        == f"Created {path} (3 lines)."
    assert path.read_text() == "one\ntwo\nthree\n"
    assert editor.run({"command": "view", "path": str(path)}) == "     1\tone\n     2\ttwo\n     3\tthree"
    assert editor.run({"command": "view", "path": str(path), "view_range": [2, -1]}) == "     2\ttwo\n     3\tthree"
    assert editor.run({"command": "view", "path": str(path), "view_range": [3, 2]}).startswith("Error:")

    (tmp_path / "pkg" / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "deep" / "hidden_by_depth.py").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".env").write_text("")
    listing = editor.run({"command": "view", "path": str(tmp_path)}).splitlines()
    assert listing[1:] == [f"{tmp_path}/pkg/", f"{tmp_path}/pkg/mod.py", f"{tmp_path}/pkg/sub/"]


def test_editor_str_replace_needs_exactly_one_match(tmp_path):
    path = tmp_path / "a.py"
    editor.run({"command": "create", "path": str(path), "file_text": "x = 1\ny = 2\nx = 1\n"})
    none = editor.run({"command": "str_replace", "path": str(path), "old_str": "z = 3", "new_str": "z = 4"})
    assert none.startswith("Error:") and "does not occur" in none
    two = editor.run({"command": "str_replace", "path": str(path), "old_str": "x = 1", "new_str": "x = 5"})
    assert two.startswith("Error:") and "occurs 2 times" in two and "lines 1, 3" in two
    assert path.read_text() == "x = 1\ny = 2\nx = 1\n"
    one = editor.run({"command": "str_replace", "path": str(path),
                      "old_str": "y = 2\nx = 1", "new_str": "y = 3\nx = 4"})
    assert path.read_text() == "x = 1\ny = 3\nx = 4\n"
    assert one == f"Edited {path}:\n     1\tx = 1\n     2\ty = 3\n     3\tx = 4"


def test_editor_insert_and_undo_step_back_one_edit_at_a_time(tmp_path):
    path = tmp_path / "b.txt"
    editor.run({"command": "create", "path": str(path), "file_text": "a\nb\n"})
    editor.run({"command": "insert", "path": str(path), "insert_line": 0, "new_str": "top\n"})
    assert path.read_text() == "top\na\nb\n"
    result = editor.run({"command": "insert", "path": str(path), "insert_line": 3, "new_str": "end"})
    assert path.read_text() == "top\na\nb\nend\n"
    assert result.endswith("     4\tend")
    assert editor.run({"command": "insert", "path": str(path), "insert_line": 9, "new_str": "x"}).startswith("Error:")

    editor.run({"command": "undo_edit", "path": str(path)})
    assert path.read_text() == "top\na\nb\n"
    editor.run({"command": "undo_edit", "path": str(path)})
    assert path.read_text() == "a\nb\n"
    editor.run({"command": "undo_edit", "path": str(path)})  # undoing the creation removes the file
    assert not path.exists()
    assert editor.run({"command": "undo_edit", "path": str(path)}).startswith("Error: no edit")


def test_editor_rejects_relative_paths_and_unknown_commands(tmp_path):
    assert editor.run({"command": "view", "path": "relative.py"}).startswith("Error:")
    assert editor.run({"command": "delete", "path": str(tmp_path)}).startswith("Error: unknown command")
    assert editor.run({"command": "view", "path": str(tmp_path / "missing")}).startswith("Error:")


# -- the tool loop ---------------------------------------------------------------------------


def test_tool_loop_runs_the_scripted_calls_and_logs_them(provider, tmp_path):
    target = tmp_path / "made" / "hello.txt"
    provider.set_replies([
        call("editor", command="create", path=str(target), file_text="hello from the loop\n"),
        call("bash", command=f"cat {target}"),
        "Done: the file exists.",
    ])
    transcript = tmp_path / "chat.md"
    agent = AgentSystem(MODEL, str(transcript))
    messages, usage = chat_with_tools([{"role": "user", "content": "Make a file."}], MODEL, [bash, editor],
                                      max_tool_calls=10, log=agent.log)

    assert target.read_text() == "hello from the loop\n"
    assert provider.count == 3 and usage.calls == 3
    system = sent_messages(provider, 0)[0]
    assert system["role"] == "system"
    for needle in ("### bash", "### editor", '"tool_name"', "<json>", '"required": ["command", "path"]'):
        assert needle in system["content"]
    # Each result is shown to the model in the next request.
    assert sent_messages(provider, 1)[-1] == {"role": "user", "content": f"Tool result:\nCreated {target} (1 lines)."}
    assert sent_messages(provider, 2)[-1]["content"] == "Tool result:\nhello from the loop\n[exit status 0]"
    assert messages[-1] == {"role": "assistant", "content": "Done: the file exists."}
    log = transcript.read_text()
    assert "Tool result:\nhello from the loop" in log and "Done: the file exists." in log


def test_tool_loop_stops_after_max_tool_calls_without_asking_again(provider, tmp_path):
    counter = tmp_path / "runs"
    provider.set_replies([call("bash", command=f"echo x >> {counter}")] * 4 + ["stop"])
    messages, _ = chat_with_tools([{"role": "user", "content": "go"}], MODEL, [bash], max_tool_calls=3)
    assert counter.read_text() == "x\nx\nx\n"
    assert provider.count == 3
    assert "limit of 3 tool calls is reached" in messages[-1]["content"]


def test_tool_loop_reports_unreadable_calls_and_accepts_raw_newlines(provider, tmp_path):
    target = tmp_path / "raw.txt"
    provider.set_replies([
        '<json>{"tool_name": "bash", "tool_input": </json>',
        '<json>{"tool_name": "editor", "tool_input": {"command": "create", "path": "' + str(target)
        + '", "file_text": "a\nb"}}</json>',
        call("nope"),
        "finished",
    ])
    chat_with_tools([{"role": "user", "content": "go"}], MODEL, [bash, editor], max_tool_calls=10)
    assert "could not be read" in sent_messages(provider, 1)[-1]["content"]
    assert target.read_text() == "a\nb"
    assert "there is no tool 'nope'" in sent_messages(provider, 3)[-1]["content"]
    assert provider.count == 4


def test_rate_limit_ends_the_loop_cleanly(provider, tmp_path):
    provider.set_replies([call("bash", command="echo one"), "never seen"])
    logged = []
    original = provider.responder

    def responder(body):  # the first call succeeds, the next one gets a 429 (as from a call limit)
        provider.add_faults(["429"])
        return original(body)

    provider.set_responder(responder)
    messages, usage = chat_with_tools([{"role": "user", "content": "go"}], MODEL, [bash], max_tool_calls=5,
                                      log=logged.append)
    assert messages[-1]["content"] == "Tool result:\none\n[exit status 0]"
    assert usage.calls == 1 and len(provider.requests) == 2
    assert "RateLimitError" in logged[-1] and "tool loop stops" in logged[-1]


def test_budget_refusal_from_the_gateway_ends_the_loop_cleanly(gateway_factory, fake_openai, monkeypatch):
    fake_openai.set_replies([call("bash", command="echo paid"), "never seen"])
    # Output costs $1 per 1M tokens and a call may write 1000: the budget holds the first call's worst
    # case ($0.001) and no more once that call has cost anything.
    gw = gateway_factory(budget_usd=0.0010005, max_output_tokens=1000, prices={MODEL: [0.0, 1.0]})
    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "meta", [MODEL]))
    logged = []
    messages, usage = chat_with_tools([{"role": "user", "content": "go"}], MODEL, [bash], max_tool_calls=5,
                                      log=logged.append)
    assert fake_openai.count == 1 and usage.calls == 1
    assert messages[-1]["content"] == "Tool result:\npaid\n[exit status 0]"
    assert "402" in logged[-1] and "budget exhausted" in logged[-1]


class ToolCallingFake(FakeOpenAI):
    """The fake server, answering with a native tool call when a reply is {"name", "arguments"} JSON."""

    def _completion(self, request_json, content):
        payload = super()._completion(request_json, content)
        try:
            wanted = json.loads(content)
        except ValueError:
            return payload
        payload["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
            "function": {"name": wanted["name"], "arguments": json.dumps(wanted["arguments"])},
        }]}
        payload["choices"][0]["finish_reason"] = "tool_calls"
        return payload


def test_native_tool_calls(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENT_GATEWAY_URL", raising=False)
    target = tmp_path / "native.txt"
    with ToolCallingFake() as fake:
        monkeypatch.setenv("OPENAI_API_BASE", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        fake.set_replies([
            json.dumps({"name": "editor", "arguments": {"command": "create", "path": str(target), "file_text": "n"}}),
            "all done",
        ])
        messages, _ = chat_with_tools([{"role": "user", "content": "go"}], MODEL, [bash, editor],
                                      max_tool_calls=5, native=True)
        first, second = fake.requests[0]["json"], fake.requests[1]["json"]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash", "editor"]
    assert target.read_text() == "n"
    call_id = second["messages"][-2]["tool_calls"][0]["id"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": call_id,
                                      "content": f"Created {target} (1 lines)."}
    assert messages[-1] == {"role": "assistant", "content": "all done"}


# -- the meta agent --------------------------------------------------------------------------


def test_meta_agent_prompt_names_its_inputs_and_edits_the_repository(provider, tmp_path):
    repo = tmp_path / "workspace"
    (repo / "task_agent").mkdir(parents=True)
    agent_file = repo / "task_agent" / "task_agent.py"
    agent_file.write_text("PROMPT = 'old'\n")
    evals = tmp_path / "evals"
    provider.set_replies([
        call("bash", command="pwd"),
        call("editor", command="str_replace", path=str(agent_file), old_str="'old'", new_str="'new'"),
        "Changed the prompt.",
    ])
    transcript = tmp_path / "meta.md"
    try_command = "python /opt/hyperagents/try_agent.py --rows 5"
    MetaAgent(MODEL, str(transcript)).forward(str(repo), str(evals), iterations_left=7, try_command=try_command)

    first = provider.requests[0]["json"]
    prompt = first["messages"][-1]["content"]
    assert first["temperature"] == 0
    assert f"Modify any part of the codebase at {repo}" in prompt
    assert str(evals) in prompt and "predictions.csv" in prompt and "report.json" in prompt
    assert "Iterations left in this run: 7." in prompt
    assert f"`{try_command}`" in prompt
    assert sent_messages(provider, 1)[-1]["content"] == f"Tool result:\n{repo}\n[exit status 0]"
    assert agent_file.read_text() == "PROMPT = 'new'\n"
    log = transcript.read_text()
    assert prompt in log and "Changed the prompt." in log and "3 model calls" in log


def test_meta_agent_prompt_leaves_out_what_it_is_not_given(provider, tmp_path):
    provider.set_replies(["Nothing to do."])
    MetaAgent(MODEL).forward(str(tmp_path), str(tmp_path / "evals"))
    prompt = sent_messages(provider, 0)[-1]["content"]
    assert "Iterations left" not in prompt and "runs the current task agent" not in prompt
    assert f"codebase at {tmp_path}" in prompt
