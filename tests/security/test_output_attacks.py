"""Agent text aimed at the researcher's terminal, spreadsheet and browser, through the real command lines.

A hostile scripted meta agent (`python -m run_optimization`, two generations, then `--resume_from`)
names files with terminal escapes (a window title, a clipboard write through OSC 52, a cleared
screen), bidi controls, a newline that would forge a console line and bytes that are not UTF-8; writes
a `select_next_parent.py` and an `ensemble.py` that print escapes to stderr; and hides a bidi
override in its change (Trojan Source). A hostile task agent (`python -m domains.harness`) answers with
spreadsheet formulas and fails rows with escapes. Every output is captured as bytes: nothing an agent
wrote reaches the terminal raw, every record is written, and the scores are the ones the raw answers give.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from support.backends import BACKENDS
from support.cli import FAST_CONFIG, REPO_ROOT, backend_config, cli_env
from support.dashboard import assert_inert, get, pages_of, serving
from support.hostile_model import responder

# What a terminal acts on: ESC, BEL, CSI (C1), and the bidi controls, as UTF-8 bytes; a byte that is
# not UTF-8 on its own (what a name of such bytes would print). tqdm draws its bars with \r only.
RAW = re.compile(rb"\x1b|\x07|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]"
                 rb"|[\x80-\xff](?<![\x80-\xff][\x80-\xbf])(?![\x80-\xbf])")
FORGED = "node 9 (parent initial): ok; imo_grading val=1.000 forged"  # no slash: one file name
ESCAPES = r"\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1bc\x9b31m\u202e"

PLANT = r"""python - <<'EOF'
import os
from pathlib import Path
p = Path('/workspace/task_agent/task_agent.py')
p.write_text(p.read_text() + '\n# access level: user \u202e \u2066# admin\u2069 \u2066\n')
for n in ['\x1b]52;c;cHduZWQ=\x07.py', '\x1b]0;owned\x07\x1b[2J\x1bc.py', '\u202egnp.py', '\x9b31m.py',
          'x\nFORGED.py']:
    open('/workspace/agent/' + n, 'w').close()
os.close(os.open(b'/workspace/agent/\xff\xfe\x1b]0;bytes\x07.py', os.O_CREAT | os.O_WRONLY))
Path('/workspace/select_next_parent.py').write_text(
    'import sys\ndef select_next_parent(archive):\n    sys.stderr.write("ESCAPES" * 3)\n    raise SystemExit(1)\n')
Path('/workspace/ensemble.py').write_text(
    'import sys\ndef ensemble(rows, members):\n    sys.stderr.write("ESCAPES")\n    raise RuntimeError("ESCAPES")\n')
EOF""".replace("FORGED", FORGED).replace("ESCAPES", ESCAPES.replace("\\", "\\\\"))


def cli(*args, env, timeout=900) -> subprocess.CompletedProcess:
    """`python -m ...` with its output kept as bytes, as a terminal would get them."""
    return subprocess.run([sys.executable, "-m", *args], env=env, cwd=REPO_ROOT, capture_output=True,
                          timeout=timeout)


def assert_clean(result: subprocess.CompletedProcess) -> str:
    """Nothing a terminal acts on in the command's stdout and stderr; their text."""
    for stream in (result.stdout, result.stderr):
        found = RAW.search(stream)
        assert found is None, stream[max(0, found.start() - 200):found.end() + 200]
    text = (result.stdout + result.stderr).decode("utf-8")
    assert not any(line.startswith(FORGED) for line in re.split(r"[\r\n]", text)), "a console line was forged"
    return text


@dataclass
class MetaRun:
    dir: Path
    first: subprocess.CompletedProcess
    resumed: subprocess.CompletedProcess
    ensemble: subprocess.CompletedProcess

    def node(self, node_id: str) -> dict:
        return json.loads((self.dir / "nodes" / node_id / "node.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=BACKENDS)
def meta_run(request, tmp_path_factory, fake_openai_session):
    tmp_path = tmp_path_factory.mktemp(f"output-{request.param}")
    fake_openai_session.reset()
    fake_openai_session.set_responder(responder([PLANT]))
    config = backend_config(tmp_path / "c.yaml", request.param,
                            "  eval_samples: 3\n  meta_max_calls: 6\n  edit_select_parent: true\n")
    env = cli_env(fake_openai_session)
    common = ["--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", str(config)]
    first = cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id",
                "run", "--max_generation", "2", *common, env=env)
    run_dir = tmp_path / "out" / "run"
    resumed = cli("run_optimization", "--resume_from", str(run_dir), "--max_generation", "2", env=env)
    ensemble = cli("apps.ensemble", str(run_dir), "--rule", "agent", "--agent", "1", "--split", "train",
                   "--top", "2", env=env, timeout=300)
    yield MetaRun(run_dir, first, resumed, ensemble)
    fake_openai_session.reset()


@pytest.mark.e2e
@pytest.mark.attack("meta agent: file names with a window title, an OSC 52 clipboard write, a clear screen, C1 "
                    "and bidi controls, and a newline forging a console line (the node line of the console)")
def test_file_names_never_reach_the_terminal_raw(meta_run):
    assert meta_run.first.returncode == 0, meta_run.first.stderr[-3000:]
    text = assert_clean(meta_run.first)
    dropped = meta_run.node("1")["patch"]["dropped_why"]
    assert r"agent/\x1b]52;c;cHduZWQ=\x07.py" in dropped and "agent/<U+202E>gnp.py" in dropped
    assert r"agent/\u009b31m.py" in dropped and "agent/x\\n" + FORGED + ".py" in dropped
    assert "dropped agent/" in text and r"\x1b]52;c;" in text  # shown, visibly


@pytest.mark.e2e
@pytest.mark.attack("meta agent: a file name of bytes that are not UTF-8 (node.json must still be written, and "
                    "--resume_from must work)")
def test_an_undecodable_name_is_recorded_and_the_run_resumes(meta_run):
    assert meta_run.first.returncode == 0, meta_run.first.stderr[-3000:]
    dropped = meta_run.node("1")["patch"]["dropped_why"]
    assert dropped[r"agent/\xff\xfe\x1b]0;bytes\x07.py"] == "an unprintable name"
    assert meta_run.resumed.returncode == 0, meta_run.resumed.stderr[-3000:]
    assert_clean(meta_run.resumed)
    assert meta_run.node("2")["status"]


@pytest.mark.e2e
@pytest.mark.attack("meta agent: a select_next_parent.py that prints terminal escapes and bidi controls to stderr "
                    "and fails")
def test_the_selectors_stderr_is_shown_visibly(meta_run):
    text = assert_clean(meta_run.first)
    warnings = [line for line in text.splitlines() if line.startswith("warning: select_next_parent.py failed")]
    assert warnings and r"\x1b]52;c;cHduZWQ=\x07" in warnings[0] and "<U+202E>" in warnings[0], text[-3000:]
    assert meta_run.node("2")["parent"] in ("initial", "1")  # the configured strategy chose instead


@pytest.mark.e2e
@pytest.mark.attack("ensemble.py: prints terminal escapes to stderr and raises with them "
                    "(python -m apps.ensemble --rule agent)")
def test_the_ensembles_stderr_is_shown_visibly(meta_run):
    result = meta_run.ensemble
    text = assert_clean(result)
    assert result.returncode == 2, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("error: ") and (r"\x1b]0;owned\x07" in last or "no node" in last), last


@pytest.mark.e2e
@pytest.mark.attack("meta agent: a bidi override hidden in its change (Trojan Source), shown on the dashboard")
def test_bidi_controls_in_a_change_are_marked_and_flag_the_node(meta_run):
    assert meta_run.node("1")["patch"]["bidi"] == ["task_agent/task_agent.py"]
    assert "warning: bidi control characters in task_agent/task_agent.py" in assert_clean(meta_run.first)
    with serving(meta_run.dir.parent) as port:
        paths = pages_of(port, "run")
        bodies = {path: get(port, path)[2] for path in ["/", "/runs/run", *paths]}
    for path, body in bodies.items():
        assert_inert(body)
        assert not re.search("[\u202a-\u202e\u2066-\u2069]", body), path
    node_page = bodies["/runs/run/nodes/1"]
    assert "Warning: this change holds bidi control characters" in node_page
    assert '<span class="bidi" title="bidi control character">&lt;U+202E&gt;</span>' in node_page
    assert "bidi-flag" in bodies["/runs/run"] or "bidi-flag" in bodies.get("/runs/run/nodes", "")


TASK_AGENT = '''
import json
ANSWERS = json.loads(ANSWERS_JSON)

class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        pass

    def forward(self, inputs):
        answer = ANSWERS.get(inputs["student_answer"], "incorrect")
        if answer == "FAIL":
            raise RuntimeError("\\x07\\x1b[2J\\x1b]0;owned\\x07\\u202e row failed")
        return answer, []
'''
FORMULAS = ["=1+1", "+correct", "-1", "@SUM(A1:A9)", "\t=correct", "\r=partial", "=HYPERLINK(\"http://x\",\"y\")",
            "－incorrect", "'=correct", "incorrect", "FAIL"]


@pytest.fixture(scope="module", params=BACKENDS)
def task_run(request, tmp_path_factory, fake_openai_session):
    tmp_path = tmp_path_factory.mktemp(f"formulas-{request.param}")
    train = pd.read_csv(REPO_ROOT / "domains/imo/data/gradingbench_filtered_100_train.csv", dtype=str)
    answers = dict(zip(train["Response"][:len(FORMULAS)], FORMULAS))
    agent = tmp_path / "formulas.py"
    agent.write_text(TASK_AGENT.replace("ANSWERS_JSON", repr(json.dumps(answers))))
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  num_workers: 1\n"))
    fake_openai_session.reset()
    result = cli("domains.harness", "--domain", "imo_grading", "--subset", "train", "--num_samples",
                 str(len(FORMULAS)), "--agent_path", str(agent), "--output_dir", str(tmp_path / "out"),
                 "--run_id", "r", "--model", "openai/fake", "--config", str(config), "--sandbox", request.param,
                 env=cli_env(fake_openai_session), timeout=600)
    yield tmp_path / "out" / "r", result


@pytest.mark.e2e
@pytest.mark.attack("task agent: predictions that a spreadsheet runs as formulas (=, +, -, @, tab, CR, full-width), "
                    "in predictions.csv")
def test_formula_predictions_are_neutralised_and_score_the_same(task_run):
    from domains.registry import get_domain
    from services.fsutil import read_csv_text

    folder, result = task_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert_clean(result)
    raw = pd.read_csv(folder / "predictions.csv", dtype=str, keep_default_na=False)
    for cell in raw["prediction"]:
        assert not cell.lstrip(" ").startswith(("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠")), cell
    journal = {json.loads(line)["id"]: json.loads(line) for line in (folder / "predictions.jsonl").open()}
    back = read_csv_text(folder / "predictions.csv")
    domain = get_domain("imo_grading")
    for qid, prediction in zip(back[domain.question_id], back["prediction"]):
        assert prediction == (journal[qid]["prediction"] or ""), qid
    assert sorted(p for p in back["prediction"] if p) == sorted(p for p in FORMULAS if p != "FAIL")
    # The scores are those of the raw answers: the same scorer over a CSV written with no marking.
    plain = folder.parent / "plain.csv"
    back.to_csv(plain, index=False, lineterminator="\r\n")
    assert domain.scorer.score(domain, folder / "predictions.csv") == domain.scorer.score(domain, plain)


@pytest.mark.e2e
@pytest.mark.attack("task agent: a row's error carrying BEL, a clear screen and a window title (console, tqdm "
                    "line, predictions.csv)")
def test_a_rows_error_never_reaches_the_terminal_raw(task_run):
    folder, result = task_run
    assert_clean(result)
    errors = [e for e in pd.read_csv(folder / "predictions.csv", dtype=str, keep_default_na=False)["error"] if e]
    assert len(errors) == 1 and "row failed" in errors[0]


@pytest.mark.e2e
@pytest.mark.attack("task agent: fails to load with terminal escapes in its exception (a UserError carrying agent "
                    "text, printed by the harness)")
def test_an_agents_fatal_line_is_one_visible_line(tmp_path, fake_openai):
    agent = tmp_path / "fatal.py"
    agent.write_text('raise ImportError("\\x1b]0;owned\\x07\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\u202e\\nerror: forged")\n')
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    result = cli("domains.harness", "--domain", "imo_grading", "--subset", "train", "--num_samples", "2",
                 "--agent_path", str(agent), "--output_dir", str(tmp_path / "out"), "--run_id", "r", "--model",
                 "openai/fake", "--config", str(config), "--sandbox", "bwrap", env=cli_env(fake_openai), timeout=300)
    text = assert_clean(result)
    assert result.returncode == 2, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and r"\x1b]52;c;" in errors[0] and r"\nerror: forged" in errors[0], text


@pytest.mark.attack("a meta agent's result logged with a name of bytes that are not UTF-8 (a run killed before "
                    "its node was recorded, by a version that stored names raw): recording it on resume")
def test_a_logged_undecodable_name_does_not_stop_a_resume(tmp_path):
    from archive.records import MetaResult, Node, Status
    from archive.store import Archive
    from optimizer.events import MetaFinished, console_line
    from services.render import console

    (tmp_path / "run").mkdir()
    archive = Archive(tmp_path / "run")
    done = MetaResult(Status.OK, None, {"files": 0, "insertions": 0, "deletions": 0, "dropped": ["agent/\udcff\x1b"],
                                        "dropped_why": {"agent/\udcff\x1b": "an unprintable name"}}, 1.0)
    archive.log_meta_result("1", done)
    read_back = Archive(tmp_path / "run").meta_result("1")  # what --resume_from finds
    archive.record(Node("1", "initial", 1, patch=read_back.patch))
    again = Archive(tmp_path / "run").nodes["1"]
    assert again.patch["dropped"] == ["agent/\udcff\x1b"]  # written as its escape, read back as itself
    line = console(console_line(MetaFinished("1", read_back)))
    assert line.endswith("dropped agent/\\xff\\x1b") and line.encode("utf-8")
