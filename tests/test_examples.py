"""examples/ as a user runs them: each folder copied out of the checkout, its README's command run for real
(the loop in a subprocess, bwrap sandboxes) with the fake provider (support.fake_openai) playing the task
model, the meta model and the judge, and the outcome checked against what the example says it shows.

The fake meta agent makes one edit, which puts MARKER in the task agent's prompt; the fake task model answers
right only when it sees MARKER. So the initial node scores 0 and its child 1, by each example's own scorer:
the exact rule of examples/exact_scorer (which must read "1,440 minutes" as 1440), the judge of
examples/llm_judge (which must be asked, and obeyed, for every row), and a run must find that child with the
tournament of examples/parent_selection_plugin or with the strategies examples/api_sweep sweeps.
"""

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli
from support.scripted_loop import events, nodes, one_edit
from support.venvs import PIP_TAIL_LINES

EXAMPLES = REPO_ROOT / "examples"
FOLDERS = ("exact_scorer", "llm_judge", "parent_selection_plugin", "api_sweep")
# Each example's command as its README shows it; a test below runs it, with the fake provider's flags after it.
COMMANDS = {
    "exact_scorer": "python -m run_optimization --domain_spec examples/exact_scorer/conversions.yaml --preset quick",
    "llm_judge": "python -m run_optimization --domain_spec examples/llm_judge/definitions.yaml --preset quick",
    "parent_selection_plugin": "python -m run_optimization --domain_spec examples/exact_scorer/conversions.yaml "
                               "--preset quick --parent_selection tournament",
    "api_sweep": "python examples/api_sweep/sweep.py",
}
MARKER = "ANSWER-WITH-CARE-3"
IMPROVE = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": "You are an expert working on a task", "new_str": f"{MARKER} You are an expert working on a task"}}
FAKE_MODELS = ("--task_model", "openai/fake", "--meta_model", "openai/fake-meta")


def rows(*files: Path) -> dict[str, dict]:
    """The rows of the CSV files, by question."""
    return {r["Question"]: r for f in files for r in csv.DictReader(f.open())}


def responder(task_answer, judge=None):
    """The fake provider: the meta agent's one edit, the task model's `task_answer(question, marked)`, and
    `judge(request)` for a judge's request."""

    def respond(request: dict) -> str:
        if (meta := one_edit(request, IMPROVE)) is not None:
            return meta
        user = str(request["messages"][-1]["content"])
        if judge and "## Rubric" in user:
            return judge(request)
        found = re.search(r"((?:How many|Define) [^?.]+[?.])", user)
        if not found:
            return "ok"
        return "<json>" + json.dumps({"response": task_answer(found.group(1), MARKER in user)}) + "</json>"

    return respond


def copied(tmp_path: Path, *names: str) -> Path:
    """The examples `names` copied as a user copies them, into tmp_path/examples; that folder."""
    for name in names:
        shutil.copytree(EXAMPLES / name, tmp_path / "examples" / name, dirs_exist_ok=True)
    return tmp_path / "examples"


def fast_config(tmp_path: Path) -> Path:
    path = tmp_path / "fast.yaml"
    path.write_text(FAST_CONFIG + "loop:\n  meta_timeout_s: 120\n")
    return path


def run_command(name: str, tmp_path: Path, fake, *extra: str, env=None, timeout=600):
    """The README's command of example `name`, run in tmp_path on the copies there, into tmp_path/out/run."""
    words = COMMANDS[name].split()
    assert words[:2] == ["python", "-m"]
    spec_at = words.index("--domain_spec") + 1
    words[spec_at] = str(tmp_path / words[spec_at])
    return run_cli(*words[2:], "--output_dir", str(tmp_path / "out"), "--run_id", "run", *FAKE_MODELS,
                   "--config", str(fast_config(tmp_path)), *extra, env=env or cli_env(fake), timeout=timeout)


# -- the folders and their READMEs ---------------------------------------------------------------------------
def test_every_example_has_a_readme_with_the_command_that_is_tested_and_the_index_names_it():
    index = (EXAMPLES / "README.md").read_text()
    for name in FOLDERS:
        readme = (EXAMPLES / name / "README.md").read_text()
        assert COMMANDS[name] in readme.replace("\\\n  ", ""), name
        assert f"]({name}/)" in index, name
    for spec in ("exact_scorer/conversions.yaml", "llm_judge/definitions.yaml"):
        assert spec in index


def test_the_readmes_count_the_rows_and_give_the_defaults_that_are_there():
    for name, stem in (("exact_scorer", "conversions"), ("llm_judge", "definitions")):
        readme = (EXAMPLES / name / "README.md").read_text()
        for split in ("train", "val", "test"):
            path = EXAMPLES / name / f"{stem}_{split}.csv"
            said = re.search(rf"(\d+) {split}\b", readme)
            count = len(list(csv.DictReader(path.open()))) if path.exists() else None
            assert (int(said.group(1)) if said else None) == count, (name, split)
    sys.path.insert(0, str(EXAMPLES / "api_sweep"))
    try:
        from sweep import parse_args
    finally:
        sys.path.remove(str(EXAMPLES / "api_sweep"))
    defaults = parse_args([])
    readme = (EXAMPLES / "api_sweep" / "README.md").read_text()
    assert (f"By default: seeds {' and '.join(map(str, defaults.seeds))}, strategies "
            f"{' and '.join(f'`{s}`' for s in defaults.strategies)}, {defaults.generations} generations a run, "
            f"the {defaults.preset} preset") in readme.replace("\n", " ")


# -- exact_scorer --------------------------------------------------------------------------------------------
def test_the_exact_scorer_reads_the_last_number_and_compares_it_exactly():
    sys.path.insert(0, str(EXAMPLES / "exact_scorer"))
    try:
        from exact_number import score
    finally:
        sys.path.remove(str(EXAMPLES / "exact_scorer"))
    row = {"Answer": "1440"}
    right = ["1440", "1,440 minutes", "There are 24 x 60 = 1440.", " +1440\n"]
    wrong = ["144", "1440.5", "14,40", "1440 minutes, or 24 hours", "", "one thousand four hundred and forty"]
    assert [score(p, row) for p in right] == [True] * len(right)
    assert [score(p, row) for p in wrong] == [False] * len(wrong)


@pytest.mark.e2e
def test_the_exact_scorer_example_runs_the_loop_and_scores_by_its_own_rule(tmp_path, fake_openai):
    folder = copied(tmp_path, "exact_scorer") / "exact_scorer"
    table = rows(*folder.glob("conversions_*.csv"))
    fake_openai.set_responder(responder(
        lambda question, marked: f"That makes {int(table[question]['Answer']):,} in all." if marked else "About 7."))
    r = run_command("exact_scorer", tmp_path, fake_openai, "--max_generation", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "scorer   conversions: accuracy by exact_number:score, the user's own function" in r.stdout
    found = nodes(tmp_path / "out" / "run")
    assert found["initial"]["scores"]["conversions"] == {"train": 0.0}  # screened out: on no row right
    assert found["1"]["scores"]["conversions"] == {"train": 1.0, "val": 1.0}  # "That makes 1,440 in all." is 1440
    prompts = [str(q["json"]["messages"]) for q in fake_openai.requests if "How many" in str(q.get("json"))]
    assert prompts and not any("x 60" in p for p in prompts)  # the hidden working never reaches an agent


# -- llm_judge -----------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_llm_judge_example_is_scored_by_the_judge_it_names(tmp_path, fake_openai):
    folder = copied(tmp_path, "llm_judge") / "llm_judge"
    table = rows(*folder.glob("definitions_*.csv"))
    judged = []

    def judge(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        answer = re.search(r"<answer>\n(.*?)\n</answer>", prompt, re.S).group(1)
        reference = re.search(r"## Reference answer\n(.*?)\n", prompt).group(1)
        judged.append((request["model"], request["temperature"], "twelve-year-old" in prompt))
        return "Same meaning.\nVERDICT: PASS" if answer == reference else "Not a definition.\nVERDICT: FAIL"

    fake_openai.set_responder(responder(
        lambda question, marked: table[question]["Reference"] if marked else "It is a word.", judge))
    r = run_command("llm_judge", tmp_path, fake_openai, "--max_generation", "1",
                    "--set", "models.judge=openai/fake-judge")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "accuracy by an LLM judge with the spec's rubric, model openai/fake-judge" in r.stdout
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)
    assert found["initial"]["scores"]["definitions"] == {"train": 0.0}  # screened out: no row passed
    assert found["1"]["scores"]["definitions"] == {"train": 1.0, "val": 1.0}
    assert judged and set(judged) == {("fake-judge", 0, True)}  # the rubric, at temperature 0, to the judge's model
    others = [str(q["json"]["messages"]) for q in fake_openai.requests
              if q.get("json") and q["json"].get("model") != "fake-judge"]
    val_references = [r["Reference"] for r in csv.DictReader((folder / "definitions_val.csv").open())]
    assert others and not any("twelve-year-old" in m or any(v in m for v in val_references) for m in others)
    # Every verdict is booked to the judge; one asked again (a row screened, then evaluated in full) is replayed
    # from the gateway's cache, not paid for twice.
    paid, replayed = sqlite3.connect(run_dir / "ledger.sqlite").execute(
        "SELECT SUM(cache_hit = 0), SUM(cache_hit = 1) FROM calls WHERE role = 'judge'").fetchone()
    assert paid == len(judged) and replayed > 0


# -- parent_selection_plugin ---------------------------------------------------------------------------------
def test_the_tournament_gives_each_rank_its_chance_and_equal_scores_share():
    sys.path.insert(0, str(EXAMPLES / "parent_selection_plugin"))
    try:
        from tournament_selection import Tournament
    finally:
        sys.path.remove(str(EXAMPLES / "parent_selection_plugin"))
    from search.parent_selection import Candidate, Context, ParentSelection

    strategy = Tournament()
    assert isinstance(strategy, ParentSelection) and not strategy.needs_rows
    scores = [0.9, 0.1, 0.5, 0.5]
    candidates = [Candidate(str(i), s, 0, i) for i, s in enumerate(scores)]
    assert strategy.weights(candidates, Context()) == [7 / 16, 1 / 16, 4 / 16, 4 / 16]
    assert Tournament(1).weights(candidates, Context()) == [0.25] * 4  # size 1: every node alike
    assert Tournament(3).weights(candidates[:2], Context()) == [7 / 8, 1 / 8]
    with pytest.raises(ValueError, match="at least one node"):
        Tournament(0)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """The example plug-in as pip installs it, from a copy (pip builds in its source folder): a folder to put on
    the path, as tests/test_search_plugins.py installs its own."""
    tmp = tmp_path_factory.mktemp("tournament")
    source = copied(tmp, "parent_selection_plugin") / "parent_selection_plugin"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                           "--no-build-isolation", "--target", str(tmp / "site"), str(source)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail("pip install of the example plug-in failed:\n" + "\n".join(
            (done.stdout + done.stderr).splitlines()[-PIP_TAIL_LINES:]), pytrace=False)
    points = next((tmp / "site").glob("hyperagents_tournament-0.1.dist-info/entry_points.txt")).read_text()
    assert "[hyperagents_imo.parent_selection]" in points and "tournament = tournament_selection:Tournament" in points
    return tmp / "site"


def with_plugin(env: dict, site: Path) -> dict:
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}


def tournament_run(tmp_path: Path, fake, site: Path) -> dict:
    """The exact scorer's task copied, the fake provider answering it (rightly once the edit is in), and the
    environment that has the installed plug-in."""
    copied(tmp_path, "exact_scorer")
    table = rows(*(tmp_path / "examples" / "exact_scorer").glob("conversions_*.csv"))
    fake.set_responder(responder(lambda question, marked: table[question]["Answer"] if marked else "7"))
    return with_plugin(cli_env(fake), site)


@pytest.mark.e2e
def test_the_installed_tournament_chooses_the_parents_of_a_run_by_name(tmp_path, fake_openai, plugin_site):
    env = tournament_run(tmp_path, fake_openai, plugin_site)
    assert "tournament" in run_cli("run_optimization", "--help", env=env).stdout
    r = run_command("parent_selection_plugin", tmp_path, fake_openai, "--max_generation", "2", "--seed", "3",
                    env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "parent selection tournament" in r.stdout
    picks = {e["generation"]: e for e in events(tmp_path / "out" / "run") if e["event"] == "parent_chosen"}
    assert sorted(picks) == [1, 2] and {p["strategy"] for p in picks.values()} == {"tournament"}
    assert {k: c["p"] for k, c in picks[2]["candidates"].items()} == {"initial": 0.25, "1": 0.75}


@pytest.mark.e2e
def test_the_tournaments_size_is_a_setting_of_its_own_in_the_config(tmp_path, fake_openai, plugin_site):
    env = tournament_run(tmp_path, fake_openai, plugin_site)
    r = run_command("parent_selection_plugin", tmp_path, fake_openai, "--set", "search.tournament={size: 0}",
                    env=env)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == \
        "error: search.tournament: a tournament draws at least one node, not 0", r.stderr[-2000:]
    assert not (tmp_path / "out" / "run").exists()
    r = run_command("parent_selection_plugin", tmp_path, fake_openai, "--max_generation", "2", "--seed", "3",
                    "--set", "search.tournament={size: 1}", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    picks = {e["generation"]: e for e in events(tmp_path / "out" / "run") if e["event"] == "parent_chosen"}
    assert {k: c["p"] for k, c in picks[2]["candidates"].items()} == {"initial": 0.5, "1": 0.5}  # size 1: random


# -- api_sweep -----------------------------------------------------------------------------------------------
def sweep(tmp_path: Path, fake, site: Path, *args: str, config: Path | None = None):
    script = copied(tmp_path, "api_sweep", "exact_scorer") / "api_sweep" / "sweep.py"
    return subprocess.run([sys.executable, str(script), "--config", str(config or fast_config(tmp_path)), *FAKE_MODELS,
                           "--output_dir", str(tmp_path / "sweep"), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=with_plugin(cli_env(fake), site))


@pytest.mark.e2e
def test_the_sweep_runs_every_seed_and_strategy_through_the_api_and_tabulates_them(tmp_path, fake_openai,
                                                                                     plugin_site):
    from hyperagents import load_run

    table = rows(*(EXAMPLES / "exact_scorer").glob("conversions_*.csv"))
    fake_openai.set_responder(responder(lambda question, marked: table[question]["Answer"] if marked else "7"))
    r = sweep(tmp_path, fake_openai, plugin_site, "--seeds", "0", "1", "--strategies", "best", "tournament",
              "--generations", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("seed ") and "strategy" in line))
    body = [line.split() for line in lines[header + 2:header + 6]]
    assert [(cells[0], cells[1]) for cells in body] == [("0", "best"), ("0", "tournament"), ("1", "best"),
                                                        ("1", "tournament")]
    for cells in body:
        view = load_run(tmp_path / "sweep" / f"seed{cells[0]}_{cells[1]}")
        assert view.config["loop"]["parent_selection"] == cells[1] and view.config["loop"]["seed"] == int(cells[0])
        assert cells[2:6] == [view.state, str(len(view.nodes)), view.best.id, "1.000"] == ["finished", "2", "1",
                                                                                          "1.000"]
    assert any(line.split() == ["tournament", "1.000", "2"] for line in lines), r.stdout

    # Again, with more generations: the run goes on from its folder, one generation more.
    r = sweep(tmp_path, fake_openai, plugin_site, "--seeds", "0", "--strategies", "best", "--generations", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    view = load_run(tmp_path / "sweep" / "seed0_best")
    assert view.state == "finished" and list(view.nodes) == ["initial", "1", "2"] and view.nodes["2"].parent == "1"
    assert any(line.split()[:5] == ["0", "best", "finished", "3", view.best.id] for line in r.stdout.splitlines())


@pytest.mark.e2e
def test_a_sweep_of_a_strategy_no_one_has_is_one_line(tmp_path, fake_openai, plugin_site):
    r = sweep(tmp_path, fake_openai, plugin_site, "--strategies", "no_such")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("sweep: loop.parent_selection must be one of ") and "tournament" in r.stderr
    assert not (tmp_path / "sweep" / "seed0_no_such").exists()


@pytest.mark.e2e
def test_a_sweep_stopped_by_an_outage_says_so_and_goes_on_when_run_again(tmp_path, fake_openai, plugin_site):
    table = rows(*(EXAMPLES / "exact_scorer").glob("conversions_*.csv"))
    fake_openai.set_responder(responder(lambda question, marked: table[question]["Answer"] if marked else "7"))
    outage = tmp_path / "outage.yaml"  # the breaker trips after 2 failed calls, none retried
    outage.write_text(FAST_CONFIG.replace("gateway:\n", "gateway:\n  breaker_failures: 2\n  max_retries: 0\n"))
    args = ("--seeds", "0", "--strategies", "best", "--generations", "1")
    fake_openai.add_faults(["503"] * 200)
    r = sweep(tmp_path, fake_openai, plugin_site, *args, config=outage)
    assert r.returncode == 75 and r.stderr.strip().splitlines()[-1].startswith("sweep: "), r.stderr[-3000:]
    assert "Traceback" not in r.stderr and (tmp_path / "sweep" / "seed0_best" / "run.json").is_file()
    fake_openai.reset()
    fake_openai.set_responder(responder(lambda question, marked: table[question]["Answer"] if marked else "7"))
    r = sweep(tmp_path, fake_openai, plugin_site, *args, config=outage)
    assert r.returncode == 0, r.stderr[-3000:]
    assert any(line.split()[:5] == ["0", "best", "finished", "2", "1"] for line in r.stdout.splitlines()), r.stdout
