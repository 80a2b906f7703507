"""A domain spec (domains/spec.py) cannot leak what it hides, and a run's record of one never names code.

- An id that is, or spells, what the spec hides is refused before a run starts.
- The sandbox never sees a row's id: an agent that echoes whatever names its row (its transcript's
  name, the worker's message, the folder's other transcripts) scores nothing, on a spec whose ids
  would give every label away.
- A record in `domain_specs/` naming `builtins:exec`, `os:system` or a module planted beside the
  run is never imported or called by a resume, `apps.ensemble`, `hyperagents.evaluate`,
  `apps.analyze`, `hyperagents.load_run` or the dashboard's reader: those that must score stop
  in one line naming --domain_spec, the others show the stored scores.
- A user's scorer is loaded by file: a `litellm.py` and a `json.py` beside it are never imported
  by the host, and a scorer file reached through `..` or a link out of the spec's folder is refused.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from services.config import PROJECT_ROOT
from services.errors import UserError
from support.backends import BACKENDS
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli

EXAMPLE = PROJECT_ROOT / "examples" / "capitals"
SPEC = ("name: {name}\ndata: {{train: train.csv, val: val.csv}}\nid: {id}\ninputs: {{question: Question}}\n"
        "label: Answer\nhidden: [Answer, Notes]\nscorer: {scorer}\n")


def task(folder: Path, ids: list[str] | None = None, scorer: str = "exact", id_column: str = "qid",
         name: str = "leaky") -> Path:
    """A spec of four rows per split in `folder` (ids `ids`, else q0..q3); its path."""
    folder.mkdir(parents=True, exist_ok=True)
    answers = ["Rome", "Paris", "Lima", "Oslo"]
    for split in ("train", "val"):
        pd.DataFrame({"qid": ids or [f"{split}{i}" for i in range(4)],
                      "Question": [f"What is the capital of country {i} ({split})?" for i in range(4)],
                      "Answer": answers, "Notes": [f"note {i}" for i in range(4)]}
                     ).to_csv(folder / f"{split}.csv", index=False)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(name=name, id=id_column, scorer=scorer))
    return spec


def one_line_exit_2(r, *parts: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert all(p in r.stderr for p in parts), r.stderr


# -- ids -------------------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.attack("spec domain: an id column that is the label, a hidden column, or whose values are the labels")
@pytest.mark.parametrize("id_column, ids, message", [
    ("Answer", None, "key 'id': column 'Answer' is the label column"),
    ("Notes", None, "key 'id': column 'Notes' is the hidden column"),
    ("qid", ["Rome", "Paris", "Lima", "Oslo"], "key 'id': row 'Rome' of"),
], ids=["label", "hidden", "values"])
def test_an_id_that_tells_what_is_hidden_is_refused(id_column, ids, message, tmp_path):
    spec = task(tmp_path / "t", ids, id_column=id_column)
    for command in (["run_optimization", "--domain_spec", str(spec), "--dry_run"],
                    ["domains.harness", "--domain_spec", str(spec), "--subset", "val", "--output_dir",
                     str(tmp_path / "out"), "--model", "openai/fake"]):
        one_line_exit_2(run_cli(*command, timeout=120), message)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


ECHO_AGENT = '''
import gc, json, os


class TaskAgent:
    def __init__(self, model, chat_history_file=None):
        self.file = chat_history_file

    def forward(self, inputs):
        seen = {os.path.basename(self.file)[len("chat_history_"):-len(".md")]}
        seen |= set(os.listdir(os.path.dirname(self.file)))  # the other rows' transcripts
        for obj in gc.get_objects():  # the worker's message for this row, in this process
            if type(obj) is dict and obj.get("inputs") == inputs:
                seen.add(str(obj.get("id")))
        named = sorted(s for s in seen if s.startswith("row-"))
        open(self.file, "w").write(json.dumps(sorted(seen)))
        return (named[0][len("row-"):] if named else sorted(seen)[0]), []
'''


@pytest.mark.e2e
@pytest.mark.attack("task agent: echoes whatever names its row (its transcript's name, the worker's message, the "
                    "other transcripts) on a spec whose ids spell the labels")
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_that_echoes_its_id_scores_nothing(backend, tmp_path, fake_openai):
    # "row-Rome" is not "Rome": the spec passes its checks, yet an agent that saw its id would score 1.0.
    ids = ["row-Rome", "row-Paris", "row-Lima", "row-Oslo"]
    spec = task(tmp_path / "t", ids)
    agent = tmp_path / "echo.py"
    agent.write_text(ECHO_AGENT)
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG.replace("harness:\n", "harness:\n  num_workers: 2\n"))
    env, out = cli_env(fake_openai), tmp_path / "out" / "r"
    r = run_cli("domains.harness", "--domain_spec", str(spec), "--subset", "val", "--agent_path", str(agent),
                "--output_dir", str(tmp_path / "out"), "--run_id", "r", "--model", "openai/fake", "--config",
                str(config), "--sandbox", backend, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("domains.report", "--domain_spec", str(spec), "--dname", str(out), "--config", str(config),
                env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["accuracy"] == 0 and set(report["row_scores"]) == set(ids)  # the host keeps the real ids
    transcripts = out / "agent_evals"
    seen = [json.loads(p.read_text()) for p in transcripts.glob("chat_history_*.md")]
    assert len(seen) == 4 and not any(i in json.dumps(seen) for i in ids)
    # Host-side, each transcript is found by its row's id through the journal.
    journal = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {rec["id"] for rec in journal} == set(ids)
    assert all((transcripts / f"chat_history_{rec['token']}.md").is_file() for rec in journal)


# -- a record that names a callable -------------------------------------------------------------------
def capitals_answer(request: dict) -> str:
    """The fake provider: the task agent names Paris for France (a score above 0, so the node is evaluated
    in full) and answers every other row with Python that would write the marker if it ran."""
    if "capital of France" in str(request["messages"][-1]["content"]):
        return '<json>{"response": "Paris"}</json>'
    return '<json>{"response": "open(__import__(\'os\').environ[\'SPEC_MARKER\'], \'w\').write(\'ran\')"}</json>'


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, fake_openai_session):
    """A finished run of the capitals example whose stored predictions are code that writes a marker, and
    a planted module beside it that writes the marker when imported; its record is rewritten per test."""
    tmp = tmp_path_factory.mktemp("hostile-record")
    shutil.copytree(EXAMPLE, tmp / "my_task")
    config = tmp / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 20\n")
    fake_openai_session.reset()
    fake_openai_session.set_responder(capitals_answer)
    marker = tmp / "marker"
    env = cli_env(fake_openai_session, SPEC_MARKER=str(marker))
    r = run_cli("run_optimization", "--domain_spec", str(tmp / "my_task" / "capitals.yaml"), "--max_generation",
                "0", "--output_dir", str(tmp / "out"), "--run_id", "run", "--task_model", "openai/fake",
                "--meta_model", "openai/fake", "--config", str(config), env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp / "out" / "run"
    planted = run_dir / "planted"
    planted.mkdir()
    (planted / "planted.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n"
                                        "def score(prediction, row):\n    return 1.0\n")
    (planted / "capitals.yaml").write_text("")
    assert not marker.exists()
    return run_dir, marker, env, tmp / "my_task" / "capitals.yaml"


def forge(run_dir: Path, scorer: str, scorer_sha256: str = "") -> None:
    """The run's record of its spec, rewritten by whoever handed the folder over."""
    path = run_dir / "domain_specs" / "capitals.json"
    record = json.loads(path.read_text())
    record.update(scorer=scorer, scorer_sha256=scorer_sha256, source=str(run_dir / "planted" / "capitals.yaml"))
    path.write_text(json.dumps(record))


SCORERS = ["builtins:exec", "os:system", "planted:score"]


@pytest.mark.e2e
@pytest.mark.attack("a run folder whose spec record names builtins:exec, os:system or a module planted beside it "
                    "as its scorer, handed to a resume, apps.ensemble, hyperagents.evaluate, apps.analyze, "
                    "hyperagents.load_run and the dashboard's reader")
@pytest.mark.parametrize("scorer", SCORERS)
def test_a_record_that_names_a_callable_runs_nothing(scorer, hostile_run, tmp_path, monkeypatch):
    from apps.dashboard.reader import RunReader
    from domains import registry
    from hyperagents import evaluate, load_run

    run_dir, marker, env, _ = hostile_run
    forge(run_dir, scorer)
    monkeypatch.setenv("SPEC_MARKER", str(marker))
    monkeypatch.setattr(registry, "_specs", {})  # this process's spec domains: the folder's alone
    flag = "--domain_spec FILE"
    one_line_exit_2(run_cli("run_optimization", "--resume_from", str(run_dir), "--final_test", env=env,
                            timeout=300), flag)
    one_line_exit_2(run_cli("apps.ensemble", str(run_dir), "--split", "val", "--top", "1", env=env,
                            timeout=300), flag)
    with pytest.raises(UserError, match=flag):
        evaluate(f"{run_dir}:initial", "capitals", "val")
    r = run_cli("apps.analyze", str(run_dir), "--out", str(tmp_path / "analysis"), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    view = load_run(run_dir)
    data = RunReader(run_dir).read()
    assert data.problems == [] and view.nodes["initial"].scores["capitals"]["val"].value == 0.0
    assert not marker.exists()
    assert not any(name.startswith("planted") for name in sys.modules)


@pytest.mark.e2e
@pytest.mark.attack("a run folder whose spec record names a scorer, resumed with --domain_spec naming a spec of "
                    "that name with another scorer or another scorer file")
@pytest.mark.parametrize("scorer, message", [("planted:score", "the file of scorer planted:score (sha256) differs"),
                                             ("other:score", "key 'scorer' differs")], ids=["file", "name"])
def test_a_resume_takes_only_the_spec_the_run_kept(scorer, message, hostile_run, tmp_path):
    run_dir, marker, env, spec = hostile_run
    forge(run_dir, "planted:score", "0" * 64)
    mine = tmp_path / "mine"
    shutil.copytree(spec.parent, mine)
    (mine / f"{scorer.partition(':')[0]}.py").write_text("def score(prediction, row):\n    return 1.0\n")
    (mine / "capitals.yaml").write_text(spec.read_text().replace("scorer: exact", f"scorer: {scorer}"))
    one_line_exit_2(run_cli("run_optimization", "--resume_from", str(run_dir), "--domain_spec",
                            str(mine / "capitals.yaml"), "--final_test", env=env, timeout=300), message)
    assert not marker.exists()


# -- the scorer's module ---------------------------------------------------------------------------------
SHADOW = "open({marker!r}, 'a').write('{name} ')\n"
SCORE_AND_IMPORT = """
import sys
from domains.registry import get_domain, use_domain_specs
domain = get_domain(use_domain_specs([sys.argv[1]])[0])
report = domain.scorer.score(domain, __import__("pathlib").Path(sys.argv[2]))
import json, litellm
print(json.dumps({"accuracy": report["accuracy"], "json": json.__file__, "litellm": litellm.__file__,
                  "scorers": sorted(m for m in sys.modules if m.startswith("_hyperagents_scorer_")),
                  "shadows": sorted(m for m in sys.modules if m in ("rules",))}))
"""


@pytest.mark.e2e
@pytest.mark.attack("a litellm.py and a json.py beside a spec's scorer module, for the host process that holds the "
                    "provider keys to import")
def test_files_beside_a_scorer_are_never_imported_by_the_host(tmp_path):
    spec = task(tmp_path / "t", scorer="rules:score")
    marker = tmp_path / "marker"
    for name in ("litellm", "json"):
        (spec.parent / f"{name}.py").write_text(SHADOW.format(marker=str(marker), name=name))
    (spec.parent / "rules.py").write_text("import json\n\ndef score(prediction, row):\n"
                                          "    return json.loads(json.dumps(prediction)) == row['Answer']\n")
    predictions = tmp_path / "predictions.csv"
    rows = pd.read_csv(spec.parent / "val.csv", dtype=str)
    rows["prediction"] = ["Rome", "x", "Lima", "y"]
    rows.to_csv(predictions, index=False)
    r = subprocess.run([sys.executable, "-c", SCORE_AND_IMPORT, str(spec), str(predictions)], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["accuracy"] == 0.5 and len(got["scorers"]) == 1 and got["shadows"] == []
    assert str(spec.parent) not in got["json"] + got["litellm"]
    assert not marker.exists()


@pytest.mark.e2e
@pytest.mark.attack("a spec's scorer module reached through .. or a link out of the spec's folder")
@pytest.mark.parametrize("how", ["dotdot", "file_link", "folder_link"])
def test_a_scorer_outside_the_specs_folder_is_refused(how, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    marker = tmp_path / "marker"
    (outside / "evil.py").write_text(f"open({str(marker)!r}, 'w')\ndef score(prediction, row):\n    return 1\n")
    scorer, message = {"dotdot": ("..elsewhere.evil:score", "key 'scorer': '..elsewhere.evil:score' is none of"),
                       "file_link": ("evil:score", "leads out of the spec's folder"),
                       "folder_link": ("sub.evil:score", "leads out of the spec's folder")}[how]
    spec = task(tmp_path / "t", scorer=scorer)
    if how == "file_link":
        (spec.parent / "evil.py").symlink_to(outside / "evil.py")
    elif how == "folder_link":
        (spec.parent / "sub").symlink_to(outside)
    one_line_exit_2(run_cli("run_optimization", "--domain_spec", str(spec), "--dry_run", timeout=120), message)
    assert not marker.exists()


def test_a_kept_spec_is_matched_before_its_scorer_is_used(tmp_path, monkeypatch):
    """use_domain_specs with a run's folder: the user's spec must be the domain the run kept."""
    from domains import registry
    from domains.registry import use_domain_specs
    from domains.spec import read_spec, record_spec

    monkeypatch.setattr(registry, "_specs", {})
    spec = task(tmp_path / "t", scorer="rules:score", name="kept_rules")
    (spec.parent / "rules.py").write_text("def score(prediction, row):\n    return 1.0\n")
    run_dir = tmp_path / "run"
    record_spec(run_dir, read_spec(spec))
    assert use_domain_specs([str(spec)], run_dir) == ["kept_rules"]
    (spec.parent / "rules.py").write_text("def score(prediction, row):\n    return 0.0\n")
    with pytest.raises(UserError, match="the file of scorer rules:score"):
        use_domain_specs([str(spec)], run_dir)
    other = task(tmp_path / "u", scorer="exact", name="not_kept")
    with pytest.raises(UserError, match="kept no domain not_kept"):
        use_domain_specs([str(other)], run_dir)
