"""Coding agents as the meta agent (issue 39): the names --meta_agent and models.meta_agent take, a plug-in agent
installed from tests/plugins/shell_agent and run through the real loop in a bwrap sandbox (its edit committed,
evaluated, its events read into the meta transcript), the one-line stop of a run whose agent is missing or
broken, and for each bundled agent installed here: its program runs in a sandbox with no network, and every flag
the project gives it is one its own --help (or program) knows."""

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from services.coding_agents import BUNDLED, INSTALL_HINT, coding_agent
from services.coding_agents.base import INSTALL_DIR, Launch
from services.config import load_config, validate
from services.errors import UserError
from support.backends import BACKENDS
from support.cli import REPO_ROOT, cli_env, run_cli, run_loop
from support.dashboard import assert_inert, get, serving
from support.scripted_loop import MARKER, loop_config, nodes, responder
from support.venvs import PIP_TAIL_LINES


@pytest.fixture(scope="module")
def agent_site(tmp_path_factory):
    """tests/plugins/shell_agent as pip installs it (its module and dist-info with the entry points)."""
    tmp = tmp_path_factory.mktemp("agent-plugin")
    source = tmp / "source"
    shutil.copytree(REPO_ROOT / "tests" / "plugins" / "shell_agent", source)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                           "--no-build-isolation", "--target", str(tmp / "site"), str(source)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail("pip install of the plug-in failed:\n" + "\n".join(
            (done.stdout + done.stderr).splitlines()[-PIP_TAIL_LINES:]), pytrace=False)
    return tmp / "site"


def with_plugin(env: dict, site) -> dict:
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}


def test_the_config_takes_the_meta_agents_by_name_and_refuses_others():
    config = load_config(None, None)
    assert config.models.meta_agent == "builtin"
    for name in ("builtin", "paper", *BUNDLED):
        config.models.meta_agent = name
        validate(config)
    config.models.meta_agent = "claude"
    with pytest.raises(UserError, match="models.meta_agent must be one of builtin, paper, claude-code, codex, "
                                        "mini-swe-agent, got 'claude'"):
        validate(config)


def test_help_lists_the_meta_agents_and_a_wrong_one_is_one_line():
    usage = run_cli("run_optimization", "--help")
    assert re.search(r"--meta_agent \{builtin,paper,claude-code,codex,mini-swe-agent\}", usage.stdout)
    r = run_cli("run_optimization", "--domain", "imo_grading", "--meta_agent", "claude", "--dry_run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "invalid choice: 'claude'" in r.stderr


def test_paper_is_the_references_agent_code(tmp_path):
    """--meta_agent paper starts from the reference's folder (the default task agent) and is refused for a task
    agent the reference never started from, in one line; the dry run's plan says so."""
    r = run_cli("run_optimization", "--domain", "imo_grading", "--meta_agent", "paper", "--dry_run",
                "--output_dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "initial_agents/paper" in r.stdout or "reference" in r.stdout
    r = run_cli("run_optimization", "--domain", "imo_grading", "--meta_agent", "paper", "--initial_agent",
                "proof_solver", "--dry_run", "--output_dir", str(tmp_path))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--meta_agent builtin runs the meta agent that initial agent comes with" in r.stderr


def test_a_coding_agent_on_the_ray_executor_is_one_line():
    from services.coding_agents import require_meta_agent

    require_meta_agent("builtin", "ray")
    if coding_agent("codex").program(INSTALL_DIR) is not None:
        with pytest.raises(UserError, match="^--meta_agent codex runs on this machine's sandboxes only"):
            require_meta_agent("codex", "ray")


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_a_coding_agent_without_a_sandbox_stops_the_run_in_one_line(name, tmp_path, fake_openai):
    """--sandbox none runs the built-in meta agent on this host (with a warning); a coding agent, whose own
    permission checks are off, never: the run stops before anything is made, installed or not."""
    for dry_run in ([], ["--dry_run"]):  # the plan of a dry run never shows what the run would refuse
        r = run_loop(tmp_path, fake_openai, "--meta_agent", name, "--sandbox", "none", *dry_run,
                     config=loop_config(tmp_path))
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr == (f"error: --meta_agent {name} runs in a sandbox only (bwrap or docker): under --sandbox "
                            "none it would run commands on this host, its own permission checks off; drop --sandbox "
                            "none\n")
        assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_a_plug_in_agent_is_listed_and_a_broken_or_missing_one_stops_the_run_in_one_line(tmp_path, agent_site,
                                                                                          fake_openai):
    env = with_plugin(cli_env(fake_openai), agent_site)
    usage = run_cli("run_optimization", "--help", env=env)
    assert "shell-agent" in usage.stdout and "missing-agent" in usage.stdout
    for name, line in (("missing-agent", f"error: the meta agent missing-agent is not installed: run {INSTALL_HINT}"),
                       ("broken-agent", "error: meta agent plug-in broken-agent (shell_agent:BrokenAgent, entry point "
                                        "group hyperagents_imo.meta_agents): BrokenAgent lacks what a coding agent")):
        r = run_loop(tmp_path / name, fake_openai, "--meta_agent", name, config=loop_config(tmp_path), env=env)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith(line), r.stderr
        assert not (tmp_path / name / "out" / "run").exists()  # stopped before anything was made


@pytest.mark.e2e
def test_a_plug_in_agent_edits_through_the_real_loop(tmp_path, agent_site, fake_openai):
    """shell-agent runs in the generation's bwrap sandbox on the workspace: its edit is committed and evaluated
    (the improved task agent scores 1.0), its prompt is the workspace's with the run's values put in, the
    settings' flag reached it, and its events are the node's meta transcript."""
    env = with_plugin(cli_env(fake_openai), agent_site)
    fake_openai.set_responder(responder({}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--meta_agent", "shell-agent", "--sandbox", "bwrap",
                 config=loop_config(tmp_path), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    child = nodes(run_dir)["1"]
    assert child["status"] == "ok" and child["patch"]["files"] == 1
    assert MARKER in (run_dir / "nodes" / "1" / "patch.diff").read_text()
    assert child["scores"]["imo_grading"]["val"] == 1.0
    meta = run_dir / "untrusted" / "1" / "meta"
    transcript = (meta / "meta_chat_history.md").read_text()
    assert transcript.startswith("## user\n\nImprove the agent in /workspace. Try it with python /opt/hyperagents/"
                                 "try_agent.py --rows")
    assert "## assistant\n\nTool call: shell sed -i task_agent.py" in transcript and "[exit status 0]" in transcript
    assert "turns 3; prompt Improve the agent in /workspace" in transcript
    assert json.loads((meta / "agent_events.jsonl").read_text().splitlines()[0])["item"]["exit_code"] == 0


def launch() -> Launch:
    return Launch("/opt/coding_agents", "{python}", "openai/m", "http://127.0.0.1:18080/v1", "AGENT_GATEWAY_KEY",
                  "KEY", "/workspace", "/tmp/agent-home", "/out/node")


def help_text(name: str) -> str:
    agent = coding_agent(name)
    program = agent.program(INSTALL_DIR)
    if name == "mini-swe-agent":
        argv = [sys.executable, "-m", "minisweagent.run.mini", "--help"]
        env = {**os.environ, "PYTHONPATH": str(INSTALL_DIR / "python"), "MSWEA_CONFIGURED": "true",
               "MSWEA_GLOBAL_CONFIG_DIR": "/tmp/mini-help", "COLUMNS": "300"}
    else:
        argv = [str(program), *(["exec"] if name == "codex" else []), "--help"]
        env = {**os.environ, "HOME": "/tmp", "CODEX_HOME": "/tmp/codex-help"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env).stdout


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_every_flag_an_agent_is_given_is_its_own(name):
    """The flags of its command and of its settings are in its --help, or (flags it hides from --help, as
    Claude Code's --max-turns) in its program's own text."""
    agent = coding_agent(name)
    if agent.program(INSTALL_DIR) is None:
        pytest.skip(f"{name} is not installed here ({INSTALL_HINT})")
    command = agent.command(launch())
    flags = {item for item in command.argv if item.startswith("--")}
    flags |= {flag.split()[0] for flag in command.settings_flags.values()}
    usage = help_text(name)
    assert usage.strip(), name
    program = agent.program(INSTALL_DIR)
    for flag in (f for f in flags if f not in usage):
        assert in_program(flag, program), f"{name}: {flag} is neither in its --help nor in its program"
    # The config keys it is given (-c KEY=VALUE, --config KEY=VALUE, a setting's "--config KEY="): each is a
    # key its program reads.
    keys = {item.split("=")[0] for before, item in zip(command.argv, command.argv[1:])
            if before in ("-c", "--config") and "=" in item}
    keys |= {flag.split()[1].split("=")[0] for flag in command.settings_flags.values() if len(flag.split()) == 2}
    for key in keys:
        *path, last = key.split(".")
        if "model_kwargs" in path:  # mini-swe-agent hands these to litellm's completion (the environment's)
            main = (Path(importlib.util.find_spec("litellm").origin).parent / "main.py").read_text()
            completion = main[main.index("\ndef completion("):][:20_000].split("\n) ->")[0]
            assert f"\n    {last}:" in completion, key
            last = path[-1]
        assert in_program(last, program), f"{name}: config key {key} is not in its program"


def in_program(text: str, program) -> bool:
    """Whether `text` is in the agent's program (a native one), or in its package's files (a Python one)."""
    where = ["-r", "--", text, str(program.parent)] if program.suffix == ".py" else ["--", text, str(program)]
    found = subprocess.run(["grep", "-a", "-F", "-l", *where], capture_output=True, text=True)
    return bool(found.stdout.strip())


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_an_installed_agent_runs_in_a_sandbox_with_no_network(name):
    """What `python -m services.sandbox check` says: the agent's program prints its version inside bwrap, where
    the install folder is mounted read-only and no network exists."""
    from services.coding_agents.check import runs_in
    from services.config import SandboxConfig
    from services.sandbox.bwrap import bwrap_unavailable

    if bwrap_unavailable():
        pytest.skip(bwrap_unavailable())
    agent = coding_agent(name)
    if agent.program(INSTALL_DIR) is None:
        pytest.skip(f"{name} is not installed here ({INSTALL_HINT})")
    said = runs_in(agent, "bwrap", SandboxConfig())
    assert said.startswith("runs (") and re.search(r"\d+\.\d+\.\d+", said), said


SED = "sed -i 's/You are an expert grader/GRADE-CAREFULLY-7 You are an expert grader/' task_agent/task_agent.py"


def mini_responder(meta_calls: list):
    """As the meta model, mini-swe-agent's two turns as native tool calls of its `bash` tool: the scripted
    improving edit, then the command that ends its run; as the task model, scripted_loop's grader."""
    grade = responder({}, [])

    def respond(request: dict):
        messages = request["messages"]
        opening = " ".join(str(m.get("content")) for m in messages[:2])
        if "/workspace" not in opening or "/feedback" not in opening:
            return grade(request)
        meta_calls.append(request)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        command = SED if turn == 0 else "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        return {"role": "assistant", "content": f"Step {turn + 1}.", "tool_calls": [
            {"id": f"call_{turn}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}

    return respond


@pytest.mark.e2e
def test_mini_swe_agent_edits_through_the_loop_and_the_gateway(tmp_path, fake_openai):
    """mini-swe-agent, installed as the README says, runs in bwrap and calls the run's gateway in OpenAI's chat
    form (the fake provider behind it scripts its tool calls): its edit is committed and evaluated, its calls are
    the meta session's in the ledger, and its trajectory is the node's meta transcript."""
    if coding_agent("mini-swe-agent").program(INSTALL_DIR) is None:
        pytest.skip(f"mini-swe-agent is not installed here ({INSTALL_HINT})")
    meta_calls: list = []
    fake_openai.set_responder(mini_responder(meta_calls))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--meta_agent", "mini-swe-agent", "--sandbox",
                 "bwrap", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    child = nodes(run_dir)["1"]
    assert child["status"] == "ok", (child, (run_dir / "nodes" / "1" / "meta_stdout.log").read_text()[-3000:])
    assert MARKER in (run_dir / "nodes" / "1" / "patch.diff").read_text()
    assert child["scores"]["imo_grading"]["val"] == 1.0
    assert len(meta_calls) == 2 and meta_calls[0]["tools"][0]["function"]["name"] == "bash"
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        booked = db.execute("SELECT COUNT(*) FROM calls WHERE node = '1' AND role = 'meta'").fetchone()[0]
    assert booked == 2
    transcript = (run_dir / "untrusted" / "1" / "meta" / "meta_chat_history.md").read_text()
    assert f"Tool call: bash {json.dumps({'command': SED})}" in transcript and "[exit status 0]" in transcript


def test_the_docs_estimate_table_is_the_agents_own():
    """docs/coding_agents.md's table of what the estimate assumes says each bundled agent's calls and tokens."""
    page = (REPO_ROOT / "docs" / "coding_agents.md").read_text()
    for name in BUNDLED:
        agent = coding_agent(name)
        assert f"| `{name}` | {agent.calls} | {agent.call_tokens:,} |" in page, name


FIRST_EVENT = {"claude-code": '"subtype":"init"', "codex": '"type":"thread.started"'}


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(FIRST_EVENT))
def test_an_npm_agent_takes_its_command_and_calls_where_it_is_pointed(tmp_path, name):
    """Claude Code and Codex started by the launcher in bwrap as the meta step starts them, with a gateway address
    nothing serves (their protocols are the gateway's to speak): each accepts its argv and environment (its first
    event, no usage error), and its model calls fail to connect, each a failure in the meta transcript."""
    from optimizer import agent_launch
    from services.config import SandboxConfig
    from services.sandbox import Mount, open_sandbox

    agent = coding_agent(name)
    if agent.program(INSTALL_DIR) is None:
        pytest.skip(f"{name} is not installed here ({INSTALL_HINT})")
    workspace, out, spec = tmp_path / "ws", tmp_path / "out", tmp_path / "spec"
    (workspace / "task_agent").mkdir(parents=True)
    out.mkdir()
    box = open_sandbox(SandboxConfig(), workspace, [Mount(out, "/out/node", writable=True),
                                                    *agent_launch.mounts(spec)], backend="bwrap")
    launch = agent_launch.launch_of(box, "openai/fake-meta", "/out/node", "KEY")
    launch = Launch(**{**launch.__dict__, "gateway_url": "http://127.0.0.1:18080/v1"})  # the relay's, unserved
    agent_launch.write_spec(spec, agent, launch)
    with box:
        argv = agent_launch.argv(box, agent, "/out/node/meta_chat_history.md", "/out/node", 3,
                                 {"repo": "/workspace", "feedback": "/feedback"})
        env = {**box.base_env(), "AGENT_GATEWAY_KEY": "KEY", **agent_launch.environment(agent, launch)}
        result = box.run(argv, env, timeout=25)
    events = (out / "agent_events.jsonl").read_text()
    assert FIRST_EVENT[name] in events.splitlines()[0], (events[:2000], result.stderr[-2000:])
    assert "unknown option" not in result.stderr and "unexpected argument" not in result.stderr
    transcript = (out / "meta_chat_history.md").read_text()
    assert transcript.startswith("## user\n\nYou are improving an AI agent system") and "/feedback" in transcript
    assert "\n## error\n" in transcript


@pytest.mark.e2e
def test_the_install_puts_the_pinned_npm_agents_into_a_folder_with_progress_lines(tmp_path):
    """The install's npm step, as `python -m services.install --coding-agents` runs it, into a folder of the test's
    (npm's cache makes a second install quick): the same numbered progress lines, and each program where the
    agent looks for it."""
    if shutil.which("npm") is None:
        pytest.skip("no npm on this machine")
    code = ("import sys; from pathlib import Path; from services import install, install_agents\n"
            "steps = install_agents.steps(('claude-code', 'codex'), Path(sys.argv[1]))\n"
            "sys.exit(install.run_steps(steps, install_agents.resolved, install_agents.node_path))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[1/1] npm install @anthropic-ai/claude-code@") and "@openai/codex@" in lines[0]
    assert lines[-1].startswith("set-up done in ")
    for name in ("claude-code", "codex"):
        program = coding_agent(name).program(tmp_path)
        assert program is not None, name
        version = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path)})
        assert coding_agent(name).install[1].rsplit("@", 1)[1] in version.stdout, version.stdout


# Each npm agent's shell tool as the gateway hands it to the provider in the chat form, and its argument.
SHELL_TOOL = {"claude-code": ("Bash", "command"), "codex": ("exec_command", "cmd")}


def npm_responder(name: str, meta_calls: list, padding: int = 0):
    """As the meta model (the requests offering the agent's shell tool), the agent's two turns: the scripted
    improving edit as a native call of its shell tool (its text padded by `padding` characters, which the fake
    provider counts as output tokens), then a final answer; as the task model, scripted_loop's grader."""
    grade = responder({}, [])
    tool, argument = SHELL_TOOL[name]

    def respond(request: dict):
        offered = [t.get("function", {}).get("name") for t in request.get("tools") or []]
        if tool not in offered:
            return grade(request)
        meta_calls.append(request)
        if any(m["role"] == "assistant" for m in request["messages"]):
            return "Done: the grader is told to grade carefully."
        call = {"name": tool, "arguments": json.dumps({argument: SED})}
        return {"role": "assistant", "content": "I edit the grader's prompt." + "." * padding,
                "tool_calls": [{"id": "call_edit", "type": "function", "function": call}]}

    return respond


def meta_ledger(run_dir) -> tuple[int, int, int]:
    """Node 1's meta calls in the run's ledger: how many, their prompt tokens and their output tokens."""
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        return db.execute("SELECT COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM calls "
                          "WHERE node = '1' AND role = 'meta'").fetchone()


def agents_usage(name: str, events: str) -> tuple[int, int]:
    """The input and output tokens the agent itself counted, from its own closing event: what the gateway's
    streamed answers told it (Anthropic's message_delta, the Responses API's response.completed)."""
    kind = "result" if name == "claude-code" else "turn.completed"
    usage = [e for e in map(json.loads, events.splitlines()) if e.get("type") == kind][-1]["usage"]
    return usage["input_tokens"], usage["output_tokens"]


def refusals(run_dir, reason: str) -> int:
    """How often the gateway refused node 1's meta calls for `reason` (the ledger's count)."""
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        row = db.execute("SELECT count FROM refusals WHERE node = '1' AND role = 'meta' AND reason = ?",
                         (reason,)).fetchone()
    return row[0] if row else 0


def installed_or_skip(name: str) -> None:
    if coding_agent(name).program(INSTALL_DIR) is None:
        pytest.skip(f"{name} is not installed here ({INSTALL_HINT})")


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SHELL_TOOL))
def test_an_npm_agent_edits_through_the_loop_in_its_own_protocol(name, backend, tmp_path, fake_openai):
    """Claude Code (Anthropic Messages) and Codex (OpenAI Responses), installed as the README says, run in the
    generation's sandbox and stream their turns from the run's gateway, which translates them to the meta model
    on the fake provider: the scripted tool call edits the task agent in the sandbox, the agent reports back and
    finishes; the child is committed, evaluated (1.0) and recorded, its calls and tokens are the meta session's
    in the ledger (the very tokens the agent counted from the streams), and its transcript is on the dashboard."""
    installed_or_skip(name)
    meta_calls: list = []
    fake_openai.set_responder(npm_responder(name, meta_calls))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--meta_agent", name, "--sandbox", backend,
                 config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    child = nodes(run_dir)["1"]
    assert child["status"] == "ok", (child, (run_dir / "nodes" / "1" / "meta_stdout.log").read_text()[-3000:])
    assert MARKER in (run_dir / "nodes" / "1" / "patch.diff").read_text()
    assert child["scores"]["imo_grading"]["val"] == 1.0 and child["full_eval"] == {"imo_grading": True}
    tool_results = [m for m in meta_calls[-1]["messages"] if m["role"] == "tool"]
    assert len(meta_calls) == 2 and len(tool_results) == 1  # the edit's outcome went back to the model
    calls, prompt, output = meta_ledger(run_dir)
    assert calls == 2 and child["tokens"]["meta"] == prompt + output
    events = (run_dir / "untrusted" / "1" / "meta" / "agent_events.jsonl").read_text()
    assert agents_usage(name, events) == (prompt, output)
    with serving(tmp_path / "out") as port:
        status, _, page = get(port, "/runs/run/nodes/1")
    assert status == 200
    assert_inert(page)
    assert "GRADE-CAREFULLY-7 You are an expert grader/&#x27; task_agent/task_agent.py" in page
    assert "Done: the grader is told to grade carefully." in page


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(SHELL_TOOL))
def test_a_gateway_refusal_stops_an_npm_agent_at_once_and_is_recorded_for_what_it_is(name, tmp_path, fake_openai):
    """The gateway's final refusals are not retried for minutes by the agent's SDK, nor taken for its failure:
    with one meta call allowed, the agent's second call is refused at the cap, it stops, and its edit is taken and
    evaluated as the built-in agent's is at its cap; with a budget its first call spends, the second is refused
    for money (Claude Code honours x-should-retry: false; Codex retries twice at most), the node is
    budget_stopped, the run stops saying so, and a resume with more budget runs the generation again."""
    installed_or_skip(name)
    meta_calls: list = []
    fake_openai.set_responder(npm_responder(name, meta_calls))
    config = tmp_path / "cap.yaml"
    config.write_text(Path(loop_config(tmp_path)).read_text().replace("loop:\n", "loop:\n  meta_max_calls: 1\n"))
    r = run_loop(tmp_path / "cap", fake_openai, "--max_generation", "1", "--meta_agent", name, config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    child = nodes(tmp_path / "cap" / "out" / "run")["1"]
    assert child["status"] == "ok" and child["scores"]["imo_grading"]["val"] == 1.0, child
    assert len(meta_calls) == 1
    # Claude Code's turn limit is the cap (the launcher's), so it stops before the gateway refuses; Codex asks
    # once more, is refused, and does not ask again.
    assert refusals(tmp_path / "cap" / "out" / "run", "429 call_limit_reached") == (0 if name == "claude-code" else 1)
    # Output at $1,000 per 1M tokens, at most 1,000 a call: an ordinary call may cost $1. The first meta call
    # writes about 700 tokens (~$0.7) of the $1.5: what is left cannot hold another.
    meta_calls.clear()
    fake_openai.set_responder(npm_responder(name, meta_calls, padding=2400))
    config = loop_config(tmp_path, gateway="  max_output_tokens: 1000\n  prices: {openai/fake-meta: [0.0, 1000.0]}\n")
    r = run_loop(tmp_path / "budget", fake_openai, "--max_generation", "1", "--meta_agent", name, "--budget_usd",
                 "1.5", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stopped: budget exhausted" in r.stdout and "--resume_from" in r.stdout
    run_dir = tmp_path / "budget" / "out" / "run"
    child = nodes(run_dir)["1"]
    assert child["status"] == "budget_stopped" and child["error"].startswith("meta agent stopped: budget exhausted")
    assert len(meta_calls) == 1
    assert refusals(run_dir, "402 budget_exceeded") == (1 if name == "claude-code" else 3)
    meta_calls.clear()
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--budget_usd", "100", "--config", config,
                env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    child = nodes(run_dir)["1"]
    assert child["status"] == "ok" and child["scores"]["imo_grading"]["val"] == 1.0
    assert len(meta_calls) == 2  # the meta agent's run again, whole


def test_the_pip_agents_get_only_what_the_environment_lacks(tmp_path):
    """mini-swe-agent's install asks pip what installing it here would add (a dry run's report), then installs
    exactly that, pinned and without its dependencies, into a python/ folder made afresh (a package an earlier
    install put there, which the environment has now, is gone)."""
    from services import install_agents

    tmp_path = tmp_path / "agents"  # made by the first step, where pip writes its report
    (dry, dry_argv), (_, argv) = install_agents.steps(("mini-swe-agent",), tmp_path)
    assert "--dry-run" in dry_argv and dry_argv[-2:] == ["--report", str(tmp_path / install_agents.PIP_REPORT)]
    assert dry.startswith("pip: what mini-swe-agent==") and dry.endswith("needs that this environment lacks")
    assert not tmp_path.exists() and install_agents.resolved(dry_argv) == dry_argv and tmp_path.is_dir()
    (tmp_path / "python" / "litellm").mkdir(parents=True)  # an older install's copy of the environment's litellm
    pins = [{"metadata": {"name": "mini-swe-agent", "version": "2.4.6"}},
            {"metadata": {"name": "rich", "version": "15.0.0"}}]
    (tmp_path / install_agents.PIP_REPORT).write_text(json.dumps({"install": pins}))
    done = install_agents.resolved(argv)
    assert done[-4:] == ["--target", str(tmp_path / "python"), "mini-swe-agent==2.4.6", "rich==15.0.0"]
    assert "--no-deps" in done and not (tmp_path / "python").exists()
