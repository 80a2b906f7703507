"""initial_agents/paper: the paper's task and meta agents, checked against the reference's semantics.

The folder is a whole evolvable repository of its own, with its own `agent` package; this process
already has the project's `agent` on its path, so the folder's modules run in child interpreters
(isolated, the folder first on sys.path) whose litellm talks to the fake OpenAI server.
"""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.cli import REPO_ROOT, cli_env

PAPER = REPO_ROOT / "initial_agents" / "paper"
MODEL = "openai/fake"
OWN_MODULES = {"agent", "task_agent", "meta_agent"}


@pytest.fixture
def env(fake_openai):
    """A child's environment: the fake server as the provider, no gateway."""
    return {k: v for k, v in cli_env(fake_openai).items() if not k.startswith("AGENT_GATEWAY")}


def in_paper(code: str, env: dict, timeout: float = 180):
    """Run `code` in a child Python whose imports come from the folder; the value it leaves in `result`."""
    script = ("import json, os, sys\nsys.path.insert(0, os.getcwd())\n" + textwrap.dedent(code)
              + "\nprint('RESULT ' + json.dumps(result))\n")
    # -I: no PYTHONPATH, no user site, no cwd on the path; -B: no __pycache__ written into the folder.
    proc = subprocess.run([sys.executable, "-I", "-B", "-c", script], cwd=PAPER, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][len("RESULT "):])


def call(tool_name: str, **tool_input) -> str:
    return f"I will use a tool.\n<json>\n{json.dumps({'tool_name': tool_name, 'tool_input': tool_input})}\n</json>"


def user_texts(fake) -> list[str]:
    """The last (user) message of every request the fake server got, in order."""
    return [r["json"]["messages"][-1]["content"] for r in fake.requests]


def run_meta(fake, env, tmp_path, replies, repo) -> dict:
    """MetaAgent.forward on `repo` with scripted replies; the tool preamble and the transcript back."""
    fake.set_replies(replies)
    log = tmp_path / "meta.md"
    result = in_paper(f"""
        from agent.tool_chat import RETRY_TEXT, tooluse_prompt
        from agent.tools import load_tools
        from meta_agent import MetaAgent
        MetaAgent(model={MODEL!r}, chat_history_file={str(log)!r}).forward(repo_path={str(repo)!r},
                                                                         eval_path="/no/evals")
        result = {{"preamble": tooluse_prompt([t["info"] for t in load_tools("all")]) + "\\n\\n",
                  "retry_text": RETRY_TEXT}}
    """, env)
    return {**result, "log": log.read_text()}


# -- the folder stands alone --------------------------------------------------------------------


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append("." if node.level else node.module)
    return found


def test_the_folder_imports_only_the_standard_library_litellm_and_itself():
    sources = sorted(PAPER.rglob("*.py"))
    assert {p.relative_to(PAPER).as_posix() for p in sources} >= {
        "task_agent.py", "meta_agent.py", "agent/base_agent.py", "agent/llm.py", "agent/tool_chat.py",
        "agent/extract.py", "agent/tools/__init__.py", "agent/tools/bash.py", "agent/tools/editor.py"}
    wrong = [f"{p.relative_to(PAPER)} imports {name}" for p in sources for name in _imports(p)
             if name.split(".")[0] not in sys.stdlib_module_names | OWN_MODULES | {"litellm"}]
    assert not wrong
    for p in sources:  # the project's size rules, which tests/test_layers.py does not apply here
        tree = ast.parse(p.read_text())
        assert p.read_text().count("\n") <= 400, p
        assert all(n.end_lineno - n.lineno < 80 for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), p
    assert (PAPER / "README.md").read_text().startswith("# ")


def test_loading_the_agents_loads_no_module_of_the_project(env):
    loaded = in_paper("""
        import task_agent, meta_agent
        from agent.tools import load_tools
        tools = load_tools("all")
        result = {"tools": [t["info"]["name"] for t in tools], "none": load_tools(),
                  "files": sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})}
    """, env)
    assert loaded["tools"] == ["bash", "editor"] and loaded["none"] == []
    # The interpreter's own files are no module of the project, even where it lies inside the checkout
    # (the README's .venv, whose site-packages hold litellm).
    interpreter = {str(path) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)
                   for path in (Path(p), Path(p).resolve())}
    ours = [f for f in loaded["files"] if f.startswith(str(REPO_ROOT)) and not f.startswith(tuple(interpreter))]
    assert ours and all(f.startswith(str(PAPER) + os.sep) for f in ours), ours


# -- the task agent -----------------------------------------------------------------------------

EXTRACTION_CASES = [
    # tagged blocks come first, then fenced ones: the fenced block is the last, though written in the middle
    ('<json>{"response": "tag 1"}</json>\n```json\n{"response": "fenced"}\n```\n<json>{"response": "tag 2"}</json>',
     "fenced"),
    ('<json>{"response": "first"}</json>\n<json>\n  {"response": "second"}\n</json>', "second"),
    ('<json>{"response": "kept"}</json>\n<json>{"response": not json}</json>', "kept"),  # malformed skipped
    ('```json\n{"response": "fenced only"}\n```', "fenced only"),
    ('<json>{"response": "x"}</json>\n```json\n["response"]\n```', "None"),  # last is a list
    ('<json>{"response": "x"}</json>\n<json>"the response"</json>', "None"),  # last is a string
    ('<json>{"response": "x"}</json><json>42</json>', "None"),  # last is a number
    ('<json>{"answer": "correct"}</json>', "None"),  # an object without "response"
    ('The grade is {"response": "correct"}; in short: correct.', "None"),  # no tags, no fence: no lenient reading
    ("", "None"),
    ('<json>{"response": 7}</json>', 7),  # the value is given back as it is
]


@pytest.mark.e2e
def test_the_prediction_is_the_response_of_the_last_json_as_the_reference_extracts(fake_openai, env):
    fake_openai.set_replies([reply for reply, _ in EXTRACTION_CASES])
    result = in_paper(f"""
        from agent.extract import extract_jsons
        from task_agent import TaskAgent
        texts = {[reply for reply, _ in EXTRACTION_CASES]!r}
        result = {{"predictions": [TaskAgent(model={MODEL!r}).forward({{"domain": "d"}})[0] for _ in texts],
                  "found": extract_jsons(texts[0]), "nothing": extract_jsons("no json here")}}
    """, env)
    assert result["predictions"] == [expected for _, expected in EXTRACTION_CASES]
    assert result["found"] == [{"response": "tag 1"}, {"response": "tag 2"}, {"response": "fenced"}]
    assert result["nothing"] is None
    assert len(fake_openai.requests) == len(EXTRACTION_CASES)  # one call per question


@pytest.mark.e2e
def test_the_task_agent_sends_the_whole_inputs_at_temperature_0_and_16384_tokens(fake_openai, env, tmp_path):
    reply = 'Graded.\n<json>\n{"response": "partial"}\n</json>'
    fake_openai.set_replies([reply])
    inputs = {"domain": "imo_grading", "problem": "Show that 'n' is odd.\nIt is.", "points": 7}
    log = tmp_path / "sub" / "task.md"
    prediction, history = in_paper(f"""
        from task_agent import TaskAgent
        result = TaskAgent(model={MODEL!r}, chat_history_file={str(log)!r}).forward({inputs!r})
    """, env)
    assert prediction == "partial"
    [request] = fake_openai.requests
    body = request["json"]
    assert body["model"] == "fake" and body["temperature"] == 0 and body["max_tokens"] == 16384
    assert "max_completion_tokens" not in body
    [message] = body["messages"]
    assert message["role"] == "user"
    # The reference's loop with no tools: an empty tool preamble, then the blank line that follows it.
    assert message["content"].startswith("\n\nYou are acting as an agent.")
    assert f"```\n{inputs}\n```" in message["content"]
    assert '<json>\n{\n    "response": ...\n}\n</json>' in message["content"]
    assert history == [{"role": "user", "text": message["content"]}, {"role": "assistant", "text": reply}]
    assert repr(reply) in log.read_text()


@pytest.mark.e2e
def test_a_task_reply_written_as_a_tool_use_gets_no_tool_and_is_asked_again(fake_openai, env, tmp_path):
    marker = tmp_path / "ran"
    fake_openai.set_replies([call("bash", command=f"touch {marker}"), '<json>{"response": "correct"}</json>'])
    prediction, _ = in_paper(f"""
        from task_agent import TaskAgent
        result = TaskAgent(model={MODEL!r}).forward({{"domain": "d"}})
    """, env)
    assert prediction == "correct" and not marker.exists()
    assert "Error: there is no tool named 'bash'" in user_texts(fake_openai)[1]


# -- the model call -----------------------------------------------------------------------------


@pytest.mark.e2e
def test_model_rules_for_temperature_and_output_limit(fake_openai, env):
    result = in_paper("""
        import litellm
        from agent.llm import get_response_from_llm, sampling_params
        models = ["openai/gpt-4o", "openai/gpt-5", "openai/gpt-5-mini", "openai/gpt-5.2",
                  "anthropic/claude-3-haiku-20240307", "anthropic/claude-sonnet-4-5-20250929"]
        result = {"params": {m: sampling_params(m) for m in models},
                  "replies": [get_response_from_llm("hi", model=m)[0] for m in ("openai/gpt-5-mini", "openai/gpt-5.2")]}
        result["drop_params"] = litellm.drop_params  # set when a call first uses litellm
    """, env)
    assert result["params"] == {
        "openai/gpt-4o": {"temperature": 0.0, "max_tokens": 16384},
        "openai/gpt-5": {"max_completion_tokens": 16384},
        "openai/gpt-5-mini": {"max_completion_tokens": 16384},
        "openai/gpt-5.2": {"temperature": 0.0, "max_completion_tokens": 16384},
        "anthropic/claude-3-haiku-20240307": {"temperature": 0.0, "max_tokens": 4096},
        "anthropic/claude-sonnet-4-5-20250929": {"temperature": 0.0, "max_tokens": 16384},
    }
    assert result["drop_params"] is True
    mini, five_two = (r["json"] for r in fake_openai.requests)
    assert "temperature" not in mini and mini["max_completion_tokens"] == 16384 and "max_tokens" not in mini
    assert five_two["temperature"] == 0 and five_two["max_completion_tokens"] == 16384


def test_inside_a_run_the_call_goes_to_the_gateway_with_the_full_model_name(fake_openai, env):
    gateway_env = {**env, "AGENT_GATEWAY_URL": fake_openai.base_url, "AGENT_GATEWAY_KEY": "session-key",
                   "OPENAI_API_BASE": "http://127.0.0.1:9/v1"}  # a dead address: only the gateway may be used
    result = in_paper("""
        from agent.llm import get_response_from_llm
        result = get_response_from_llm("hi", model="anthropic/claude-3-haiku-20240307")[0]
    """, gateway_env)
    assert result == "This is a fake reply."
    [request] = fake_openai.requests
    assert request["json"]["model"] == "anthropic/claude-3-haiku-20240307"
    assert request["json"]["max_tokens"] == 4096 and request["json"]["temperature"] == 0
    assert request["headers"]["authorization"] == "Bearer session-key"


# -- the meta agent's tool loop ------------------------------------------------------------------


@pytest.mark.e2e
def test_each_bash_call_is_a_fresh_shell_and_results_come_back_in_the_reference_shape(fake_openai, env, tmp_path):
    first = "cd / && GREETING=hello && echo $GREETING && pwd"
    second = 'pwd; echo "greeting=${GREETING:-unset}"'
    got = run_meta(fake_openai, env, tmp_path, [call("bash", command=first), call("bash", command=second), "Done."],
                   tmp_path)
    texts = user_texts(fake_openai)
    assert len(texts) == 3 and all(t.startswith(got["preamble"]) for t in texts)
    assert "{'name': 'bash'" in got["preamble"] and "{'name': 'editor'" in got["preamble"]
    instruction = texts[0][len(got["preamble"]):]
    assert "\n" not in instruction and f"`{tmp_path}`" in instruction
    assert texts[1][len(got["preamble"]):] == (
        '<json>\n    {\n        "tool_name": "bash",\n'
        "        \"tool_input\": {'command': 'cd / && GREETING=hello && echo $GREETING && pwd'},\n"
        '        "tool_output": "hello\n/"\n    }\n    </json>')
    assert f'"tool_output": "{PAPER}\ngreeting=unset"' in texts[2]  # neither the cd nor the variable persisted
    assert [m["role"] for m in fake_openai.requests[2]["json"]["messages"]] == ["user", "assistant"] * 2 + ["user"]
    assert repr("Done.") in got["log"]


@pytest.mark.e2e
def test_editor_create_and_str_replace_through_the_loop(fake_openai, env, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    target = repo / "new.py"
    replies = [call("editor", command="create", path=str(target), file_text="x = 1\ny = 2\n"),
               call("editor", command="str_replace", path=str(target), old_str="y = 2", new_str="y = 3"),
               call("editor", command="create", path=str(target), file_text="overwritten\n"),
               call("editor", command="view", path="relative/path.py"),
               "Done."]
    run_meta(fake_openai, env, tmp_path, replies, repo)
    assert target.read_text() == "x = 1\ny = 3\n"
    texts = user_texts(fake_openai)
    assert len(texts) == 5
    assert '"tool_output": "Edited ' in texts[2] and "     2\ty = 3" in texts[2]
    assert '"tool_output": "Error: ' in texts[3] and "already exists" in texts[3]
    assert '"tool_output": "Error: ' in texts[4] and "is relative" in texts[4]


@pytest.mark.e2e
def test_malformed_and_incomplete_tool_blocks_are_skipped_and_only_the_first_use_runs(fake_openai, env, tmp_path):
    def touch(name):
        return {"command": f"touch {tmp_path / name}"}

    first = "\n".join([
        f'<json>{{"tool_name": "bash", "tool_input": {json.dumps(touch("one"))}</json>',  # a brace short
        '<json>{"tool_name": "bash"}</json>',  # no tool_input
        f'<json>{{"tool_name": "bash", "tool_input": {json.dumps(touch("two"))}}}</json>',
        f'<json>{{"tool_name": "bash", "tool_input": {json.dumps(touch("three"))}}}</json>',
    ])
    only_malformed = f'<json>{{"tool_name": "bash", "tool_input": {json.dumps(touch("four"))}</json>'
    run_meta(fake_openai, env, tmp_path, [first, only_malformed, call("bash", **touch("five"))], tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".md") == ["two"]
    assert len(fake_openai.requests) == 2  # a reply with no valid tool use ends the loop


@pytest.mark.e2e
def test_the_loop_stops_after_40_tool_calls(fake_openai, env, tmp_path):
    count = tmp_path / "count"
    replies = [call("bash", command=f"echo {n} >> {count}") for n in range(1, 46)]
    got = run_meta(fake_openai, env, tmp_path, replies, tmp_path)
    assert count.read_text().split() == [str(n) for n in range(1, 41)]
    assert len(fake_openai.requests) == 41  # the 41st reply asks for a tool that is not run
    assert "limit of tool calls" in got["log"]


@pytest.mark.e2e
def test_a_reply_cut_off_inside_a_tool_use_is_asked_again(fake_openai, env, tmp_path):
    cut = '<json>\n{"tool_name": "bash", "tool_input": {"command": "echo ' + "x" * 2000
    got = run_meta(fake_openai, env, tmp_path, [cut, "Finished."], tmp_path)
    texts = user_texts(fake_openai)
    assert len(texts) == 2 and texts[1] == got["preamble"] + got["retry_text"]


def test_what_counts_as_cut_off(env):
    result = in_paper("""
        from agent.tool_chat import find_tool_uses, looks_cut_off
        def text(body, size):
            return body + "x" * (size - len(body))
        ordered = '<json>{"tool_name": "bash", "tool_input": {"command": "'
        cases = [text(ordered, 2000), text(ordered, 1999), text('tool_name tool_input <json>', 3000),
                 text('<json> tool_input tool_name', 3000), text('<json> tool_name', 3000)]
        result = [looks_cut_off(c, find_tool_uses(c)) for c in cases]
        done = text('<json>{"tool_name": "bash", "tool_input": {}}</json>', 3000)
        result.append(looks_cut_off(done, find_tool_uses(done)))
    """, env)
    assert result == [True, False, False, False, False, False]


# -- the tools ----------------------------------------------------------------------------------


def test_bash_output_format_flood_and_background_jobs(env):
    result = in_paper("""
        import time
        from agent.tools import bash
        flood = bash.tool_function("yes | head -c 5000000")
        started = time.monotonic()
        background = bash.tool_function("sleep 60 & echo $!")
        took = time.monotonic() - started
        os.kill(int(background), 9)
        result = {"both": bash.tool_function("echo out; echo err >&2"), "err": bash.tool_function("echo err >&2"),
                  "none": bash.tool_function("true"), "exit": bash.tool_function("echo before; exit 3"),
                  "flood_len": len(flood), "flood_mark": "bytes of output dropped" in flood,
                  "flood_ends": flood.startswith("y\\ny\\n") and flood.endswith("y\\ny"), "took": took}
    """, env)
    assert result["both"] == "out\nError:\nerr" and result["err"] == "Error:\nerr" and result["none"] == ""
    assert result["exit"] == "before"
    assert result["flood_mark"] and result["flood_ends"] and result["flood_len"] < 2 * 64 * 1024 + 200
    assert result["took"] < 30  # a background job does not hold the call for its 60 s


def test_bash_timeout_kills_the_whole_process_group(env, tmp_path):
    pid_file = tmp_path / "pid"
    result = in_paper(f"""
        import time
        from agent.tools import bash
        bash.TIMEOUT_S = 1
        started = time.monotonic()
        output = bash.tool_function("sleep 100 & echo $! > {pid_file}; wait")
        took = time.monotonic() - started
        pid = int(open({str(pid_file)!r}).read())
        deadline = time.monotonic() + 10
        def alive():
            try:
                return open(f"/proc/{{pid}}/stat").read().split()[2] != "Z"
            except FileNotFoundError:
                return False
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = {{"output": output, "took": took, "alive": alive(), "after": bash.tool_function("echo again")}}
    """, env)
    assert result["output"] == "Error: the command did not finish within 1 seconds and was killed."
    assert result["took"] < 30 and not result["alive"]
    assert result["after"] == "again"


def test_editor_semantics(env, tmp_path):
    root = tmp_path / "tree"
    for rel in ("a.txt", ".hidden/x.txt", "sub/b.txt", "sub/.h.txt", "sub/deep/c.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("content\n")
    f, tabs, twice, big = (tmp_path / n for n in ("f.txt", "tabs.py", "twice.txt", "big.txt"))
    tabs.write_text("\tx = 1\ny = 2\n")
    twice.write_text("same\nsame\n")
    big.write_text("z" * 30_000)
    result = in_paper(f"""
        from agent.tools.editor import tool_function as ed
        f = {str(f)!r}
        steps = [ed("view", {str(root)!r}), ed("create", f, file_text="a\\nb\\nc"), ed("create", f, file_text="again"),
                 ed("view", f, view_range=[2, 3]), ed("view", f, view_range=[0, 2]), ed("view", f, view_range=[2, -1]),
                 ed("insert", f, insert_line=1, new_str="X"), open(f).read(),
                 ed("undo_edit", f), open(f).read(), ed("undo_edit", f), open(f).read(), ed("undo_edit", f),
                 ed("str_replace", {str(twice)!r}, old_str="same", new_str="other"),
                 ed("str_replace", f, old_str="missing", new_str="x"), ed("str_replace", f, old_str="", new_str="x"),
                 ed("str_replace", {str(tabs)!r}, old_str="y = 2", new_str="y = 3"), open({str(tabs)!r}).read(),
                 ed("view", "relative.txt"), ed("create", {str(tmp_path / "empty.txt")!r}, file_text=""),
                 ed("insert", {str(root)!r}, insert_line=0, new_str="x"), ed("view", {str(big)!r}), ed("delete", f)]
        result = steps
    """, env)
    (listing, created, again, ranged, bad_range, to_end, inserted, after_insert, undone, after_undo, undone_create,
     after_undo_create, nothing_left, not_unique, missing, empty_old, tab_edit, tab_text, relative, empty_create,
     on_folder, clipped, unknown) = result
    # Two levels down (sub/deep/c.txt is the third), hidden entries and what is in them left out.
    assert listing.split("\n")[1:-1] == [str(root / p) for p in ("", "a.txt", "sub", "sub/b.txt", "sub/deep")]
    assert created.startswith("Created") and again.startswith("Error:") and "already exists" in again
    assert ranged.endswith("     2\tb\n     3\tc\n") and "     1\t" not in ranged
    assert bad_range.startswith("Error:") and to_end.endswith("     2\tb\n     3\tc\n")
    assert inserted.startswith("Edited") and after_insert == "a\nX\nb\nc"
    assert after_undo == "a\nb\nc" and after_undo_create == "a\nb\nc"  # undoing the creation keeps the file
    assert undone.startswith("Took back") and undone_create.startswith("Took back")
    assert nothing_left.startswith("There is no edit")
    assert not_unique.startswith("Error:") and "lines [1, 2]" in not_unique and twice.read_text() == "same\nsame\n"
    assert missing.startswith("Error:") and empty_old.startswith("Error:")
    assert tab_edit.startswith("Edited") and tab_text == "        x = 1\ny = 3\n"  # tabs expanded file-wide
    assert all(r.startswith("Error:") for r in (relative, empty_create, on_folder, unknown))
    # clipped before numbering, as in the reference: the mark is a numbered line of its own
    assert "     2\t<response clipped>\n" in clipped and len(clipped) < 10_200
