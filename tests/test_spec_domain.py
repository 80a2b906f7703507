"""A domain of the user's own, written as a YAML spec outside the package (domains/spec.py).

The spec is the docs' example (examples/capitals, docs/domains.md), copied to a folder of the test's own: it
runs through the loop (bwrap, the fake provider as task and meta model), a resume, the harness,
the report, `apps.analyze` and the dashboard's reader, the latter two after the spec's folder
is gone. Each scorer scores real predictions; each mistake in a spec is one line and exit 2.
"""

import io
import json
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import pandas as pd
import pytest

from services.config import PROJECT_ROOT
from services.errors import UserError
from support.cli import FAST_CONFIG, cli_env, run_cli
from support.docs import DOCS, section
from support.scripted_loop import one_edit

EXAMPLE = PROJECT_ROOT / "examples" / "capitals"
CAPITALS = {re.search(r"capital of (.+)\?", r["Question"]).group(1): r["Answer"]
            for split in ("train", "val", "test")
            for r in pd.read_csv(EXAMPLE / f"capitals_{split}.csv", dtype=str).to_dict("records")}
MARKER = "NAME-THE-CAPITAL-9"
IMPROVE = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": "You are an expert working on a task", "new_str": f"{MARKER} You are an expert working on a task"}}


def answer(request: dict, right=lambda country, user: MARKER in user) -> str:
    """The fake provider: the meta agent makes the improving edit once; the task agent names the
    capital when `right` says so, else Paris."""
    if (meta := one_edit(request, IMPROVE)) is not None:
        return meta
    user = str(request["messages"][-1]["content"])
    found = re.search(r"What is the capital of (.+?)\?", user)
    if not found:
        return "ok"
    country = found.group(1)
    return f'<json>{{"response": "{CAPITALS[country] if right(country, user) else "Paris"}"}}</json>'


def my_task(tmp_path: Path) -> Path:
    """The docs' example in a folder outside the package; the spec's path."""
    shutil.copytree(EXAMPLE, tmp_path / "my_task")
    return tmp_path / "my_task" / "capitals.yaml"


def config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(FAST_CONFIG + "loop:\n  eval_samples: 20\n  meta_timeout_s: 120\n" + extra)
    return path


def test_the_docs_show_the_example_that_is_tested():
    page = section(DOCS / "domains.md", "Your own task")
    spec = (EXAMPLE / "capitals.yaml").read_text()
    body = "".join(line + "\n" for line in spec.splitlines() if not line.startswith("#"))
    assert body in page
    assert "python -m run_optimization --domain_spec examples/capitals/capitals.yaml" in page


@pytest.mark.e2e
def test_a_spec_domain_runs_the_loop_resumes_and_is_read_without_its_spec(tmp_path, fake_openai, monkeypatch):
    from mlflow.tracking import MlflowClient

    from apps.dashboard.reader import RunReader

    spec = my_task(tmp_path)
    fake_openai.set_responder(answer)
    run_dir, env = tmp_path / "out" / "run", cli_env(fake_openai)
    r = run_cli("run_optimization", "--domain_spec", str(spec), "--max_generation", "1", "--output_dir",
                str(tmp_path / "out"), "--run_id", "run", "--task_model", "openai/fake", "--meta_model",
                "openai/fake-meta", "--config", str(config(tmp_path)), "--track", "mlflow", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "scorer   capitals: accuracy by the label, as text" in r.stdout
    # The tracker has the spec domain's scores, read with MLflow's own client.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    tracked = json.loads((run_dir / "tracking" / "mlflow.json").read_text())["kept"]["run_id"]
    client = MlflowClient(tracking_uri=(run_dir / "tracking" / "mlruns").as_uri())
    val = client.get_metric_history(tracked, "capitals/val/score")
    assert sorted((m.step, m.value) for m in val) == [(0, 0.0), (1, 1.0)]
    assert client.get_run(tracked).data.tags["best_node"] == "1"
    nodes = {n: json.loads((run_dir / "nodes" / n / "node.json").read_text()) for n in ("initial", "1")}
    assert nodes["initial"]["scores"]["capitals"] == {"train": 1 / 12, "val": 0.0}  # France alone: Paris
    assert nodes["1"]["scores"]["capitals"] == {"train": 1.0, "val": 1.0}
    report = json.loads((run_dir / "evals" / nodes["1"]["eval_keys"]["capitals"]["val"] / "report.json").read_text())
    assert report["row_scores"] == {f"val-{i}": 1.0 for i in range(1, 7)} and report["accuracy"] == 1.0
    kept = json.loads((run_dir / "domain_specs" / "capitals.json").read_text())
    assert kept["data"]["val"] == str(spec.parent / "capitals_val.csv") and len(kept["sha256"]) == 3
    # What the agent was sent: the question, never the label or the notes.
    task_prompts = [str(q["json"]["messages"]) for q in fake_openai.requests
                    if "capital of" in str((q.get("json") or {}).get("messages"))]
    assert task_prompts and not any("not Sydney" in p or "Canberra" in p for p in task_prompts)

    # Data that changed since is refused on resume; the data as it was resumes (the final test).
    val = spec.parent / "capitals_val.csv"
    original = val.read_bytes()
    val.write_bytes(original.replace(b"Rome", b"Milan"))
    resume = ["run_optimization", "--resume_from", str(run_dir), "--final_test", "--track", "mlflow"]  # as it ran
    r = run_cli(*resume, env=env, timeout=300)
    assert r.returncode == 2 and "changed since domain capitals was defined" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    val.write_bytes(original)
    r = run_cli(*resume, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    final = json.loads((run_dir / "final_test.json").read_text())
    assert "capitals" in json.dumps(final) and (run_dir / "domain_specs" / "capitals.json").is_file()

    # Read after the spec and its data are gone: the analysis and the dashboard.
    shutil.rmtree(spec.parent)
    r = run_cli("apps.analyze", str(run_dir), "--out", str(tmp_path / "analysis"), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "capitals" in (tmp_path / "analysis" / "analysis.md").read_text()
    data = RunReader(run_dir).read()
    assert data.problems == [] and data.best().node_id == "1" and data.score(data.nodes["1"]) == 1.0


@pytest.mark.e2e
def test_a_run_scored_by_a_function_of_ones_own_resumes_with_its_spec_named_again(tmp_path, fake_openai):
    spec = my_task(tmp_path)
    (spec.parent / "capital_rules.py").write_text("def score(prediction, row):\n"
                                                  "    return prediction.strip() == row['Answer']\n")
    spec.write_text(spec.read_text().replace("scorer: exact", "scorer: capital_rules:score"))
    fake_openai.set_responder(lambda request: answer(request, lambda country, user: country in ("France", "Italy")))
    run_dir, env = tmp_path / "out" / "run", cli_env(fake_openai)
    r = run_cli("run_optimization", "--domain_spec", str(spec), "--max_generation", "0", "--output_dir",
                str(tmp_path / "out"), "--run_id", "run", "--task_model", "openai/fake", "--meta_model",
                "openai/fake-meta", "--config", str(config(tmp_path)), env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    node = json.loads((run_dir / "nodes" / "initial" / "node.json").read_text())
    assert node["scores"]["capitals"]["val"] == 1 / 6  # Italy
    kept = (run_dir / "domain_specs" / "capitals.json").read_text()
    assert json.loads(kept)["scorer_sha256"] and "capital_rules.py" not in kept  # its name and digest, no path

    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--final_test", env=env, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-3000:]
    assert "capital_rules:score, a function of your own" in r.stderr and "--domain_spec FILE" in r.stderr
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--domain_spec", str(spec), "--final_test",
                env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "capitals" in (run_dir / "final_test.json").read_text()

    # The data moved elsewhere: the same spec (same digests) resumes from where it lies now.
    moved = tmp_path / "moved"
    shutil.move(spec.parent, moved)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--domain_spec", str(moved / spec.name),
                "--final_test", env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (moved / "capital_rules.py").write_text("def score(prediction, row):\n    return True\n")
    r = run_cli("run_optimization", "--resume_from", str(run_dir), "--domain_spec", str(moved / spec.name),
                "--final_test", env=env, timeout=300)
    assert r.returncode == 2 and "the file of scorer capital_rules:score (sha256) differs" in r.stderr

    shutil.rmtree(moved)
    r = run_cli("apps.analyze", str(run_dir), "--out", str(tmp_path / "analysis"), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.e2e
def test_the_harness_and_the_report_take_a_spec(tmp_path, fake_openai):
    spec = my_task(tmp_path)
    fake_openai.set_responder(lambda request: answer(request, lambda country, user: country != "Greece"))
    env, cfg = cli_env(fake_openai), config(tmp_path)
    r = run_cli("domains.harness", "--domain_spec", str(spec), "--subset", "val", "--model", "openai/fake",
                "--output_dir", str(tmp_path / "out"), "--run_id", "h", "--config", str(cfg), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_cli("domains.report", "--domain_spec", str(spec), "--dname", str(tmp_path / "out" / "h"),
                "--config", str(cfg), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "h" / "report.json").read_text())
    assert report["accuracy"] == 5 / 6 and report["row_scores"]["val-5"] == 0.0  # Greece: Paris
    assert "accuracy         83.3%  (5/6 rows in full)" in r.stdout


# -- the scorers ----------------------------------------------------------------------------------
def predictions(folder: Path, rows: list[dict]) -> Path:
    """predictions.csv as the harness writes it: the data's columns (MATH's) and each prediction."""
    path = folder / "predictions.csv"
    data = {r["qid"]: r for r in pd.read_csv(io.StringIO(MATH), dtype=str).to_dict("records")}
    pd.DataFrame([{**data[r["qid"]], **r} for r in rows]).to_csv(path, index=False)
    return path


def spec_domain(folder: Path, body: str, data: str):
    from domains.spec import read_spec

    folder.mkdir(exist_ok=True)
    (folder / "train.csv").write_text(data)
    (folder / "t.yaml").write_text("data: {train: train.csv}\nid: qid\ninputs: {problem: Problem}\n" + body)
    return read_spec(folder / "t.yaml").domain()


MATH = "qid,Problem,Answer\nm1,half of one,\\frac{1}{2}\nm2,two squared,4\nm3,a root,\\sqrt{2}\n"


def test_exact_ignores_case_and_spaces_only(tmp_path):
    domain = spec_domain(tmp_path / "t", "name: t\nlabel: Answer\nscorer: exact\nscore_key: hit\n", MATH)
    report = domain.scorer.score(domain, predictions(tmp_path, [
        {"qid": "m1", "prediction": " \\FRAC{1}{2} "}, {"qid": "m2", "prediction": "4.0"},
        {"qid": "m3", "prediction": "None"}]))
    assert report["row_scores"] == {"m1": 1.0, "m2": 0.0, "m3": 0.0}
    assert report["hit"] == 1 / 3 and report["no_answer"] == 1 and report["schema_version"] == 2


def test_math_verify_compares_final_answers_as_mathematics(tmp_path):
    domain = spec_domain(tmp_path / "t", "name: t\nlabel: Answer\nscorer: math_verify\n", MATH)
    report = domain.scorer.score(domain, predictions(tmp_path, [
        {"qid": "m1", "prediction": "so it is \\boxed{0.5}"}, {"qid": "m2", "prediction": "4.0"},
        {"qid": "m3", "prediction": "\\boxed{2}"}]))
    assert report["row_scores"] == {"m1": 1.0, "m2": 1.0, "m3": 0.0} and domain.try_match == "math"


def test_a_function_of_the_users_gives_partial_credit_and_is_checked(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "my_scoring_rule.py").write_text(
        "def near(prediction, row):\n"
        "    if prediction == 'crash':\n        return 2\n"
        "    if prediction == 'boom':\n        raise ValueError('no verdict')\n"
        "    return 1.0 if prediction == row['Answer'] else 0.5 if prediction else False\n")
    domain = spec_domain(tmp_path / "t", "name: t\nlabel: Answer\nscorer: my_scoring_rule:near\n", MATH)
    rows = [{"qid": "m1", "prediction": "\\frac{1}{2}"}, {"qid": "m2", "prediction": "5"},
            {"qid": "m3", "prediction": ""}]
    report = domain.scorer.score(domain, predictions(tmp_path, rows))
    assert report["row_scores"] == {"m1": 1.0, "m2": 0.5, "m3": 0.0} and report["accuracy"] == 0.5
    rows[1]["prediction"] = "crash"
    with pytest.raises(UserError, match=r"returned 2 for row 'm2': expected a bool or a number in \[0, 1\]"):
        domain.scorer.score(domain, predictions(tmp_path, rows))
    rows[1]["prediction"], rows[2]["prediction"] = "5", "boom"
    with pytest.raises(UserError, match=r"scorer my_scoring_rule:near raised ValueError: no verdict on row 'm3'"):
        domain.scorer.score(domain, predictions(tmp_path, rows))


def test_an_llm_judge_follows_the_rubric_through_the_gateway(tmp_path, gateway_factory, fake_openai):
    from domains.judge import GatewayJudge

    domain = spec_domain(tmp_path / "t", "name: t\nlabel: Answer\nscorer: llm_judge\n"
                         "rubric: Pass an answer equal to the reference in value.\n", MATH)
    gateway = gateway_factory()
    gateway.config.models.judge = "openai/fake-judge"
    verdicts = {"0.5": "Equal in value.\nVERDICT: PASS", "5": "VERDICT: FAIL", "x": "I cannot tell."}
    fake_openai.set_responder(lambda request: verdicts[
        re.search(r"<answer>\n(.*?)\n</answer>", request["messages"][-1]["content"], re.S).group(1)])

    class Tools:
        def judge(self):
            return GatewayJudge(gateway.config, gateway=gateway, node="n1")

    report = domain.scorer.score(domain, predictions(tmp_path, [
        {"qid": "m1", "prediction": "0.5"}, {"qid": "m2", "prediction": "5"},
        {"qid": "m3", "prediction": "x"}]), Tools())
    assert report["row_scores"] == {"m1": 1.0, "m2": 0.0, "m3": 0.0} and report["judge_unreadable"] == 1
    sent = [q["json"] for q in fake_openai.requests if q.get("json")]
    assert len(sent) == 3 and {q["model"] for q in sent} == {"fake-judge"} and {q["temperature"] for q in sent} == {0}
    assert all("Pass an answer equal" in q["messages"][-1]["content"] for q in sent)
    booked = sqlite3.connect(gateway.ledger.path).execute(
        "SELECT COUNT(*) FROM calls WHERE role = 'judge' AND node = 'n1'").fetchone()[0]
    assert booked == 3


def test_a_kept_record_names_no_code_to_run(tmp_path, monkeypatch):
    """A record of schema 1 (before scorer digests) naming builtins:exec reads back, shows its domain,
    and refuses to score or to be made ready, naming --domain_spec; nothing it names is called."""
    from domains import registry
    from domains.spec import SPECS_DIR, run_specs

    monkeypatch.setattr(registry, "_specs", {})
    record = {"schema_version": 1, "name": "kept_exec", "data": {"train": str(tmp_path / "t" / "train.csv")},
              "id": "qid", "inputs": {"problem": "Problem"}, "label": "Answer", "hidden": [],
              "scorer": "builtins:exec", "score_key": "accuracy", "rubric": "", "source": str(tmp_path / "t.yaml"),
              "sha256": {"train": "0" * 64}}
    (tmp_path / "run" / SPECS_DIR).mkdir(parents=True)
    (tmp_path / "run" / SPECS_DIR / "kept_exec.json").write_text(json.dumps(record))
    assert [s.scorer_sha256 for s in run_specs(tmp_path / "run")] == [""]
    assert registry.use_run_domains(tmp_path / "run") == ["kept_exec"]
    domain = registry.get_domain("kept_exec")
    path = predictions(tmp_path, [{"qid": "m1", "prediction": "raise SystemExit('ran')"}])
    for call in (lambda: domain.scorer.check_ready(domain), lambda: domain.scorer.score(domain, path)):
        with pytest.raises(UserError, match="builtins:exec, a function of your own, .*--domain_spec FILE"):
            call()


# -- mistakes in a spec: one line each, exit 2 -------------------------------------------------
GOOD = {"name": "capitals", "data": "{train: capitals_train.csv, val: capitals_val.csv}", "id": "qid",
        "inputs": "{question: Question}", "label": "Answer", "hidden": "[Answer, Notes]", "scorer": "exact"}
MISTAKES = [
    ({"colour": "red"}, "unknown key 'colour'"),
    ({"id": None}, "key 'id' is missing"),
    ({"data": "{train: capitals_train.csv, val: nowhere.csv}"}, "key 'data.val': no such file"),
    ({"data": "{train: capitals_train.csv, dev: capitals_val.csv}"}, "key 'data': unknown split 'dev'"),
    ({"inputs": "{question: Questoin}"}, "key 'inputs': column 'Questoin' is not in"),
    ({"hidden": "[Answer, Notez]"}, "key 'hidden': column 'Notez' is not in"),
    ({"inputs": "{question: Question, answer: Answer}"}, "key 'inputs': column 'Answer' is the label column"),
    ({"inputs": "{question: Question, notes: Notes}"}, "key 'inputs': column 'Notes' is the hidden column"),
    ({"id": "Notes"}, "key 'id': column 'Notes' is the hidden column"),
    ({"id": "Answer"}, "key 'id': column 'Answer' is the label column"),
    ({"id": "Question", "inputs": "{question: Question}"}, "key 'id': column 'Question' is an input column"),
    ({"scorer": "..capitals_rules:score"}, "key 'scorer': '..capitals_rules:score' is none of"),
    ({"scorer": "fuzzy"}, "key 'scorer': 'fuzzy' is none of exact, math_verify, llm_judge"),
    ({"scorer": "no_such_module_here:score"}, "scorer no_such_module_here:score: cannot import"),
    ({"scorer": "capitals_rules:nothing"}, "scorer capitals_rules:nothing: capitals_rules has no function 'nothing'"),
    ({"scorer": "llm_judge"}, "key 'rubric' is missing"),
    ({"name": "imo_grading"}, "a domain named imo_grading exists already"),
    ({"name": "Capitals!"}, "key 'name': 'Capitals!' is not a domain name"),
]


@pytest.mark.parametrize("change,message", MISTAKES, ids=[m for _, m in MISTAKES])
def test_each_mistake_in_a_spec_is_one_line(change, message, tmp_path):
    spec = my_task(tmp_path)
    (spec.parent / "capitals_rules.py").write_text("def score(prediction, row):\n    return True\n")
    fields = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    spec.write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    with pytest.raises(UserError) as caught:
        from domains.registry import use_domain_specs

        use_domain_specs([str(spec)])
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.e2e
@pytest.mark.parametrize("text,message", [("name: capitals\nname: [&a x, *a]\n", "anchors and aliases"),
                                          ("name: capitals\ncolour: red\n", "unknown key 'colour'")])
def test_the_command_line_says_a_spec_mistake_in_one_line_with_exit_2(text, message, tmp_path):
    spec = my_task(tmp_path)
    spec.write_text(text)
    r = run_cli("run_optimization", "--domain_spec", str(spec), "--dry_run", timeout=120)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_parquet_needs_pyarrow_and_says_so_and_json_lines_read_as_text(tmp_path):
    import importlib.util

    from domains.data import load_table

    (tmp_path / "d.jsonl").write_text('{"qid": 1, "Problem": "x", "Answer": 2.5, "tags": ["a"]}\n\n'
                                      '{"qid": 2, "Problem": "y", "Answer": null}\n')
    rows = load_table(tmp_path / "d.jsonl", ["qid", "Answer"]).to_dict("records")
    assert rows == [{"qid": "1", "Problem": "x", "Answer": "2.5", "tags": '["a"]'},
                    {"qid": "2", "Problem": "y", "Answer": "", "tags": ""}]
    if importlib.util.find_spec("pyarrow") is None:
        (tmp_path / "d.parquet").write_bytes(b"PAR1")
        with pytest.raises(UserError, match="reading parquet needs pyarrow, which is not installed"):
            load_table(tmp_path / "d.parquet")
    else:
        pd.DataFrame({"qid": [1, 2], "Answer": ["a", None]}).to_parquet(tmp_path / "d.parquet")
        assert load_table(tmp_path / "d.parquet").to_dict("records") == [{"qid": "1", "Answer": "a"},
                                                                         {"qid": "2", "Answer": ""}]


# -- plugins --------------------------------------------------------------------------------------
def test_a_plugin_adds_domains_beside_the_bundled_ones(tmp_path, monkeypatch):
    from domains import registry

    spec = my_task(tmp_path)
    (tmp_path / "capitals_plugin.py").write_text(f"def domains():\n    return [{str(spec)!r}]\n")
    info = tmp_path / "capitals_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: capitals-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINTS}]\ncapitals = capitals_plugin:domains\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_specs", {})  # no spec domain of another test by that name
    registry.plugin_domains.cache_clear()
    try:
        assert "capitals" in registry.known() and "imo_grading" in registry.known()
        domain = registry.get_domain("capitals")
        assert domain.inputs == {"question": "Question"} and domain.hidden_columns == ("Answer", "Notes")
        (tmp_path / "capitals_plugin.py").write_text("def domains():\n    raise RuntimeError('broken')\n")
        sys.modules.pop("capitals_plugin", None)
        registry.plugin_domains.cache_clear()
        with pytest.raises(UserError, match=r"plugin capitals \(capitals_plugin:domains.*does not load: RuntimeError"):
            registry.get_domain("capitals")
    finally:
        sys.modules.pop("capitals_plugin", None)
        monkeypatch.undo()
        registry.plugin_domains.cache_clear()


def test_a_spec_named_again_in_one_process_replaces_the_earlier_one_and_two_at_once_are_refused(tmp_path):
    """The Python API run twice in a notebook on moved or edited data: the spec the call names counts."""
    import shutil

    from domains.registry import get_domain, use_domain_specs
    from services.errors import UserError

    source = Path(__file__).resolve().parents[1] / "examples" / "capitals"
    copies = []
    for name in ("a", "b"):
        shutil.copytree(source, tmp_path / name)
        copies.append(str(tmp_path / name / "capitals.yaml"))
    (tmp_path / "b" / "capitals_train.csv").write_text((source / "capitals_train.csv").read_text() + "\n")
    assert use_domain_specs([copies[0]]) == ["capitals"]
    assert use_domain_specs([copies[1]]) == ["capitals"]
    assert str(get_domain("capitals").data_dir) == str(tmp_path / "b")
    with pytest.raises(UserError, match="two different domains are named capitals"):
        use_domain_specs(copies)


# -- loop.domains: a config that names its run's domains ----------------------------------------------------
def domain_lines(r) -> list[str]:
    assert r.returncode == 0, r.stderr[-2000:]
    return [line.split(":")[0].split()[1] for line in r.stdout.splitlines() if line.startswith("domain ")]


def test_a_config_names_the_domains_of_a_new_run_and_a_flag_names_others(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "capitals.yaml").write_text((EXAMPLE / "capitals.yaml").read_text().replace("name: capitals",
                                                                                          "name: my_capitals"))
    for name in ("train", "val", "test"):
        shutil.copy(EXAMPLE / f"capitals_{name}.csv", folder)
    (folder / "run.yaml").write_text("loop:\n  domains: [capitals.yaml, imo_grading]\n")  # beside it
    r = run_cli("run_optimization", "--config", str(folder / "run.yaml"), "--dry_run", cwd=tmp_path, timeout=120)
    assert domain_lines(r) == ["imo_grading", "my_capitals"]
    r = run_cli("run_optimization", "--set=loop.domains=[mine/capitals.yaml]", "--dry_run", cwd=tmp_path, timeout=120)
    assert domain_lines(r) == ["my_capitals"]  # --set: the current folder's
    r = run_cli("run_optimization", "--config", str(folder / "run.yaml"), "--domain", "imo_answer", "--dry_run",
                cwd=tmp_path, timeout=120)
    assert domain_lines(r) == ["imo_answer"]  # a flag names the run's domains: the config's are not added
    (tmp_path / "examples" / "capitals").mkdir(parents=True)  # a folder of the same name here is not the preset's
    shutil.copy(folder / "capitals.yaml", tmp_path / "examples" / "capitals")
    r = run_cli("run_optimization", "--preset", "demo", "--dry_run", cwd=tmp_path, timeout=120)
    assert domain_lines(r) == ["capitals"]
    r = run_cli("run_optimization", "--set", "loop.domains=[' ']", "--dry_run", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "loop.domains" in r.stderr, r.stderr
    r = run_cli("run_optimization", "--dry_run", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "pass --domain (e.g. --domain imo_grading) or --domain_spec FILE" in r.stderr
