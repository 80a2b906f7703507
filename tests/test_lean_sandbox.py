"""The project's sandboxed processes never import litellm (issue 28, lean sandboxes).

The worker, the meta runner, the try command and the proofgrader import check run here as the
loop runs them, in a real bwrap sandbox behind a real gateway, for this project's agents and for
initial_agents/paper, with Python's import profiler on (PYTHONPROFILEIMPORTTIME, `-X importtime`):
every module a process imports is listed on its stderr, in every thread, up to its exit. Each
process does real work (a graded row, a meta agent's try command, a package import) and none of
them may list litellm; an import of it added back anywhere on those paths fails here.
"""

import json
import shutil

import pytest

from domains.harness import worker_env
from domains.registry import get_domain
from services.config import PROJECT_ROOT, Config
from services.sandbox import Mount, open_sandbox
from services.workspace import copy_evolvable

MODEL = "openai/fake"
TASK_REPLY = '<json>{"response": "Partial"}</json>'


def imported(stderr: str) -> set[str]:
    """The modules an import profile on `stderr` names ("import time: self | cumulative | name")."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2} - {"imported package"}


def litellm_in(stderr: str) -> list[str]:
    return sorted(m for m in imported(stderr) if m.split(".")[0] == "litellm")


@pytest.fixture
def gw(gateway_factory):
    return gateway_factory(prices={MODEL: [1.0, 2.0]})


def sandbox(tmp_path, workspace, gw):
    config = Config()
    data, out, feedback = tmp_path / "data", tmp_path / "out", tmp_path / "feedback"
    for folder in (data, out, feedback):
        folder.mkdir(exist_ok=True)
    domain = get_domain("imo_grading")
    (data / "imo_grading_train.jsonl").write_text("\n".join(domain.try_lines(domain.load("train").head(2))) + "\n")
    mounts = [Mount(data, "/data"), Mount(feedback, "/feedback"), Mount(out, "/out/node", writable=True)]
    return open_sandbox(config.sandbox, workspace, mounts, gw.unix_socket, "bwrap")


def profiled_env(box, gw, role: str) -> dict:
    key = gw.new_session("n", role, [MODEL], sandbox=box)
    return {**worker_env(box, box.gateway_url, key, (MODEL,)), "PYTHONPROFILEIMPORTTIME": "1"}


def run_worker(box, gw) -> tuple[dict, str]:
    """One train row through the worker with the workspace's task agent: (its answer, the stderr)."""
    row = json.loads(get_domain("imo_grading").try_lines(get_domain("imo_grading").load("train").head(1))[0])
    result = box.run([box.python, box.trusted_script("worker.py"), "--agent_path", "task_agent", "--model", MODEL,
                      "--root", box.workdir], profiled_env(box, gw, "task"), timeout=120,
                     input=json.dumps({"id": "row-1", "inputs": row["inputs"]}) + "\n")
    assert result.ok, result.stderr[-3000:]
    [answer] = [m for m in map(json.loads, result.stdout.splitlines()) if "prediction" in m]
    return answer, result.stderr


def run_meta(box, gw, try_command: str | None) -> tuple[str, str]:
    """The workspace's meta agent once, its calls answered by the fake: (its stdout, its stderr)."""
    env = profiled_env(box, gw, "meta")
    env.update(TRY_GATEWAY_KEY=gw.new_session("n", "try", [MODEL], sandbox=box), TRY_MODEL=MODEL,
               WORKSPACE=box.workdir, PYTHONPATH=box.workdir)
    argv = [box.python, box.trusted_script("run_meta.py"), "--repo", box.workdir, "--eval_path", "/feedback",
            "--iterations_left", "1", "--model", MODEL, "--transcript", "/out/node/meta.md"]
    result = box.run(argv + (["--try_command", try_command] if try_command else []), env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, result.stderr


@pytest.mark.e2e
def test_the_projects_worker_meta_runner_and_try_command_run_without_litellm(tmp_path, gw, fake_openai):
    # The meta agent's first reply runs the try command with its import profile kept in a file; then it stops.
    try_call = {"tool_name": "bash", "tool_input": {
        "command": "python /opt/hyperagents/try_agent.py --rows 2 2> /out/node/try_imports.txt"}}

    def respond(request: dict) -> str:
        messages = request["messages"]
        if "/feedback" not in " ".join(str(m["content"]) for m in messages[:2]):
            return TASK_REPLY
        return f"<json>{json.dumps(try_call)}</json>" if len(messages) <= 2 else "Done."

    fake_openai.set_responder(respond)
    workspace = copy_evolvable(PROJECT_ROOT, tmp_path / "ws")
    with sandbox(tmp_path, workspace, gw) as box:
        answer, worker_err = run_worker(box, gw)
        meta_out, meta_err = run_meta(box, gw, "python /opt/hyperagents/try_agent.py --rows 2")
    # Each process did its work through the gateway, counted per row by the worker.
    assert answer["prediction"] == "partial" and answer["error"] is None
    assert answer["usage"]["calls"] == 1 and answer["usage"]["cost_usd"] > 0
    assert answer["usage"]["prompt_tokens"] > 0
    assert '"tool_calls": 1' in meta_out
    transcript = (tmp_path / "out" / "meta.md").read_text()
    assert "accuracy" in transcript and "Traceback" not in transcript, transcript[-2000:]
    try_err = (tmp_path / "out" / "try_imports.txt").read_text()
    # The profiles are real (they list what each process did import), and none lists litellm.
    assert {"agent.llm", "task_agent.task_agent"} <= imported(worker_err)
    assert {"meta_agent.meta_agent", "agent.tool_loop"} <= imported(meta_err)
    assert {"answers", "task_agent"} <= imported(try_err)
    assert (litellm_in(worker_err), litellm_in(meta_err), litellm_in(try_err)) == ([], [], [])


@pytest.mark.e2e
def test_the_paper_agents_run_without_litellm(tmp_path, gw, fake_openai):
    fake_openai.set_responder(lambda request: "Done." if "Change any part of the code base" in str(request["messages"])
                              else TASK_REPLY)
    workspace = tmp_path / "ws"
    shutil.copytree(PROJECT_ROOT / "initial_agents" / "paper", workspace)
    with sandbox(tmp_path, workspace, gw) as box:
        answer, worker_err = run_worker(box, gw)
        _, meta_err = run_meta(box, gw, None)
    assert answer["prediction"] == "Partial" and answer["usage"]["calls"] == 1 and answer["usage"]["cost_usd"] > 0
    assert "agent.llm" in imported(worker_err) and "agent.tool_chat" in imported(meta_err)
    assert (litellm_in(worker_err), litellm_in(meta_err)) == ([], [])


@pytest.mark.e2e
def test_a_built_proofgrader_imports_without_litellm(tmp_path):
    from setup_proofgrader_repo import Grader, _write_package

    package = tmp_path / "package"
    package.mkdir()
    _write_package(Grader(PROJECT_ROOT, "test grader", "this project's task agent", MODEL), package)
    with open_sandbox(Config().sandbox, package, backend="bwrap") as box:
        result = box.run([box.python, "-X", "importtime", "-I", "-B", box.trusted_script("check_imports.py"),
                          box.workdir], {**box.base_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, timeout=120)
    assert result.ok, result.stderr[-3000:]
    assert {"proofgrader.task_agent.task_agent", "proofgrader.agent.llm"} <= imported(result.stderr)
    assert litellm_in(result.stderr) == []


def test_the_plain_client_says_why_a_call_failed(gw, fake_openai, monkeypatch):
    from agent.llm import LLMError, get_response

    monkeypatch.setenv("AGENT_GATEWAY_URL", gw.url)
    monkeypatch.setenv("AGENT_GATEWAY_KEY", gw.new_session("n", "task", [MODEL]))
    with pytest.raises(LLMError) as refused:  # a model the session may not call: the gateway's own words
        get_response([{"role": "user", "content": "hi"}], model="openai/other")
    assert refused.value.status_code == 403 and "openai/other" in str(refused.value)
    with pytest.raises(LLMError) as unknown:  # a field the gateway does not take is named
        get_response([{"role": "user", "content": "hi"}], model=MODEL, num_retries=3)
    assert unknown.value.status_code == 400 and "num_retries" in str(unknown.value)
    fake_openai.add_faults(["slow:3"])
    with pytest.raises(LLMError) as slow:
        get_response([{"role": "user", "content": "hi"}], model=MODEL, timeout=0.5)
    assert slow.value.status_code is None and "within 0.5 s" in str(slow.value)
    monkeypatch.setenv("AGENT_GATEWAY_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(LLMError) as unreachable:
        get_response([{"role": "user", "content": "hi"}], model=MODEL)
    assert unreachable.value.status_code is None and "cannot reach the gateway" in str(unreachable.value)
