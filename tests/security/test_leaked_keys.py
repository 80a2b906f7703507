"""A task agent leaks its gateway key to a later meta agent, through a real run: `python -m run_optimization`.

The initial agent's task agent answers every row with its own session key, once as it is and once
reversed (no redaction finds that form). The scripted meta agent of generation 1 then looks for keys
in its feedback folder, decodes the reversed ones and calls the gateway with them from its sandbox,
and tries its own keys on the other role's model. Nothing may answer: the raw key is redacted from
feedback/, the decoded one was revoked when the evaluation's sandbox closed, and each key calls only
its role's model. The run ends normally, nothing is booked to the earlier node after its evaluation,
each refusal is counted, and no traceback reaches the terminal.
"""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from services.config import PROJECT_ROOT
from support.backends import BACKENDS
from support.cli import backend_config, cli_env, run_loop
from support.hostile_model import responder

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

LEAKY_TASK_AGENT = '''
import os


class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.model = model

    def forward(self, inputs):
        key = os.environ["AGENT_GATEWAY_KEY"]
        return "my key " + key + " and reversed " + key[::-1], []
'''

# Run by the meta agent in its sandbox: every key it can find or decode, tried on the gateway.
STEAL = r"""python - <<'EOF'
import glob, json, os, re, urllib.request, urllib.error
text = "".join(open(p, errors="replace").read() for p in glob.glob("/feedback/**/*", recursive=True)
               if os.path.isfile(p))
plain = sorted(set(re.findall(r"gw-[A-Za-z0-9_-]{32}", text)))
decoded = sorted({k[::-1] for k in re.findall(r"[A-Za-z0-9_-]{32}-wg", text)})

def call(key, model):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "steal"}]}).encode()
    request = urllib.request.Request(os.environ["AGENT_GATEWAY_URL"] + "/chat/completions", body,
                                     {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code

found = {"plain": plain, "decoded": len(decoded), "redacted": text.count("gw-[redacted]"),
         "stolen": [call(k, os.environ["TRY_MODEL"]) for k in decoded for _ in range(25)],
         "meta_key_on_task_model": call(os.environ["AGENT_GATEWAY_KEY"], os.environ["TRY_MODEL"]),
         "try_key_on_meta_model": call(os.environ["TRY_GATEWAY_KEY"], "openai/fake-meta")}
open("/workspace/agent/stolen.json", "w").write(json.dumps(found))
EOF"""


def agent_folder(tmp_path: Path) -> Path:
    """The project's agent code with the leaky task agent."""
    folder = tmp_path / "leaky_agent"
    for part in ("task_agent", "meta_agent", "agent"):
        shutil.copytree(PROJECT_ROOT / part, folder / part, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "task_agent" / "task_agent.py").write_text(LEAKY_TASK_AGENT)
    return folder


@pytest.fixture(scope="module", params=BACKENDS)
def run(request, tmp_path_factory, fake_openai_session):
    tmp_path = tmp_path_factory.mktemp(f"leaked-keys-{request.param}")
    fake_openai_session.reset()
    fake_openai_session.set_responder(responder([STEAL]))
    config = backend_config(tmp_path / "c.yaml", request.param,
                            "  eval_samples: 3\n  meta_max_calls: 3\n  try_max_calls: 6\n")
    result = run_loop(tmp_path, fake_openai_session, "--max_generation", "1", "--initial_agent",
                      str(agent_folder(tmp_path)), config=config, env=cli_env(fake_openai_session), timeout=900)
    yield tmp_path / "out" / "run", result
    fake_openai_session.reset()


def stolen(run_dir: Path) -> dict:
    from services.workspace import RunRepo

    repo = RunRepo(run_dir / "repo")
    return json.loads(repo.git("show", f"{repo.node_commit('1')}:agent/stolen.json"))


@pytest.mark.attack("task agent: returns its gateway key as its prediction (as it is and reversed), and the next "
                    "meta agent calls the gateway with it from its sandbox")
def test_a_leaked_task_key_is_redacted_and_revoked(run):
    run_dir, result = run
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    found = stolen(run_dir)
    assert found["plain"] == [] and found["redacted"] > 0  # the raw key never reached feedback/
    assert found["decoded"] >= 1 and set(found["stolen"]) == {401}
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        booked = db.execute("SELECT COUNT(*) FROM calls WHERE node = 'initial' AND role = 'task'").fetchone()[0]
        refused = db.execute("SELECT role, reason, count FROM refusals WHERE node = 'initial'").fetchall()
    assert booked == 0  # the leaky task agent made no call of its own, and nobody made one on its key later
    assert refused == [("task", "401 authentication_error", len(found["stolen"]))]


@pytest.mark.attack("meta agent: calls the task model with its own key, and its own model with the try command's key")
def test_keys_call_only_their_roles_models_in_a_run(run):
    run_dir, result = run
    assert result.returncode == 0, result.stderr[-2000:]
    found = stolen(run_dir)
    assert (found["meta_key_on_task_model"], found["try_key_on_meta_model"]) == (403, 403)
    with sqlite3.connect(run_dir / "ledger.sqlite") as db:
        refused = db.execute("SELECT role, reason, count FROM refusals WHERE node = '1' ORDER BY role").fetchall()
    assert refused == [("meta", "403 permission_error", 1), ("try", "403 permission_error", 1)]
