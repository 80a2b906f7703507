"""setup_proofgrader_repo: the package it builds, installed on its own, and the node it picks."""

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from archive.grader_choice import Candidate, choose, ranking_lines
from setup_proofgrader_repo import namespace_imports
from support.cli import cli_env
from support.proofgrader_runs import SyntheticRun, setup_repo

GRADING_INPUTS = {"problem": "Show that 1 + 1 = 2.", "solution": "By definition.",
                  "grading_guidelines": "Full marks for citing the definition.", "student_answer": "It is so."}


def test_imports_move_under_the_proofgrader_namespace():
    source = textwrap.dedent("""\
        from agent.llm import get_response
        from task_agent.baselines.proofautograder import TaskAgent
        import agent.extract
        import task_agent.task_agent as ta
        from agentic import x
        import agents
        def f():
            from agent import base_agent
    """)
    assert namespace_imports(source) == textwrap.dedent("""\
        from proofgrader.agent.llm import get_response
        from proofgrader.task_agent.baselines.proofautograder import TaskAgent
        import proofgrader.agent.extract; from proofgrader import agent
        import proofgrader.task_agent.task_agent as ta
        from agentic import x
        import agents
        def f():
            from proofgrader.agent import base_agent
    """)


def fresh_venv(path: Path) -> Path:
    """A virtual environment that sees the installed third-party packages (litellm, setuptools)
    through a plain path entry, which does not run their .pth files: the project's editable
    install, a .pth file, stays out, as if the project were uninstalled."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    site = next((path / "lib").glob("python3*/site-packages"))
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return path / "bin" / "python"


@pytest.mark.e2e
def test_proofautograder_package_installs_and_grades_on_its_own(tmp_path, fake_openai):
    r = setup_repo("--proofautograder", "--model", "openai/fake-grader", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    package = tmp_path / "proofgrader_repo"
    readme = (package / "README.md").read_text()
    assert "ProofAutoGrader" in readme and "Not evaluated by this build" in readme
    assert "Default model: `openai/fake-grader`, chosen when it was built; this build evaluated nothing" in readme
    assert not list(package.rglob("__pycache__"))
    python = fresh_venv(tmp_path / "venv")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", str(package)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    shutil.rmtree(package)  # a real install, not a link back: the built folder can go
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = cli_env(fake_openai)
    env.pop("PYTHONPATH", None)
    project_gone = subprocess.run([str(python), "-c", "import agent"], cwd=elsewhere, env=env,
                                  capture_output=True, text=True)
    assert project_gone.returncode != 0  # the project's own agent code is out of reach

    fake_openai.set_replies(["Step 1 is fine, step 2 has a gap.\n<points>6 out of 7</points>"])
    script = ("import json, proofgrader\n"
              "from proofgrader import grade\n"
              f"print(json.dumps([grade(**{GRADING_INPUTS!r}), proofgrader.DEFAULT_MODEL, proofgrader.__file__]))")
    r = subprocess.run([str(python), "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    label, default_model, location = json.loads(r.stdout.strip().splitlines()[-1])
    assert label == "almost" and default_model == "openai/fake-grader"
    assert str(tmp_path / "venv") in location
    sent = fake_openai.requests[-1]["json"]
    assert sent["model"] == "fake-grader"  # the recorded default, called directly (no gateway)
    assert (sent["temperature"], sent["max_tokens"]) == (0, 16384)  # as the reference's grader samples
    prompt = sent["messages"][-1]["content"]
    assert all(v in prompt for v in GRADING_INPUTS.values())


@pytest.mark.e2e
def test_a_grader_of_a_run_on_the_local_model_says_which_model_to_set_and_grades_once_set(tmp_path, fake_openai):
    run = SyntheticRun(tmp_path, model="local/smollm2-135m")
    run.node("1", (0.20, 0.50))
    r = setup_repo("--generate_dir", str(run.dir), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    built = next(line for line in r.stdout.splitlines() if line.startswith("built "))
    assert built.endswith("no default model: local/smollm2-135m is served only inside a run of this framework, so "
                          "set PROOFGRADER_MODEL to a litellm model string (e.g. PROOFGRADER_MODEL=openai/o4-mini) "
                          "or pass model= to grade() or TaskAgent()")
    package = tmp_path / "proofgrader_repo"
    readme = (package / "README.md").read_text()
    assert ("No default model: `local/smollm2-135m`, the model the run evaluated it with (the scores below), is the "
            "framework's bundled local model") in readme
    assert "| val | 0.500 | 0.200 |" in readme and "`PROOFGRADER_MODEL`" in readme
    assert "Default model:" not in readme and "Not evaluated by this build" not in readme  # one story
    provenance = json.loads((package / "proofgrader" / "provenance.json").read_text())
    assert provenance["model"] == "local/smollm2-135m" and provenance["default_model"] is None

    fake_openai.set_replies(['<json>{"response": "almost"}</json>'])
    script = ("import json\nfrom proofgrader import grade\ntry:\n"
              f"    print(json.dumps(grade(**{GRADING_INPUTS!r})))\n"
              "except ValueError as e:\n    print(json.dumps('refused: ' + str(e)))")
    env = {**cli_env(fake_openai), "PYTHONPATH": str(package)}
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout.strip().splitlines()[-1])
    assert said.startswith("refused: this grader has no default model") and "set PROOFGRADER_MODEL" in said
    assert fake_openai.requests == []  # nothing was called
    env["PROOFGRADER_MODEL"] = "openai/fake-grader"
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == "almost"
    assert fake_openai.requests[-1]["json"]["model"] == "fake-grader"


def test_an_existing_destination_is_kept_unless_forced(tmp_path):
    (tmp_path / "proofgrader_repo").mkdir()
    (tmp_path / "proofgrader_repo" / "mine.txt").write_text("keep")
    r = setup_repo("--proofautograder", cwd=tmp_path)
    assert r.returncode == 2 and "--force" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "proofgrader_repo" / "mine.txt").read_text() == "keep"
    r = setup_repo("--proofautograder", "--force", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "proofgrader_repo" / "mine.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["proofgrader_repo"]  # no staging folder left


# -- choosing the node of a run -------------------------------------------------------------
def candidate(node_id, mae, acc, position=1, full=True, status="ok"):
    report = {"normalized_mean_absolute_error": mae, "overall_accuracy": acc}
    return Candidate(node_id, position, "0" * 40, {"val": report}, position, status, full)


def picked(choice, *candidates):
    return choose(list(candidates), choice).node_id


def test_full_eval_takes_the_lowest_val_mae_then_higher_accuracy_then_the_earlier_node():
    assert picked("full_eval", candidate("a", 0.30, 0.5), candidate("b", 0.20, 0.4)) == "b"
    assert picked("full_eval", candidate("a", 0.20, 0.4, 1), candidate("b", 0.20, 0.6, 2)) == "b"
    assert picked("full_eval", candidate("b", 0.20, 0.6, 3), candidate("a", 0.20, 0.6, 2)) == "a"
    assert picked("full_eval", candidate("a", 0.20, None, 1), candidate("b", 0.20, 0.1, 2)) == "b"


def test_paper_takes_the_lowest_val_mae_then_the_earlier_node_of_any_status():
    assert picked("paper", candidate("a", 0.30, 0.9), candidate("b", 0.20, 0.1)) == "b"
    assert picked("paper", candidate("a", 0.20, 0.4, 1), candidate("b", 0.20, 0.6, 2)) == "a"  # accuracy ignored
    assert picked("paper", candidate("b", 0.20, 0.6, 3), candidate("a", 0.20, 0.6, 2)) == "a"
    # the reference ranks every node with a val report, screened only or not ok
    assert picked("paper", candidate("a", 0.2, 0.5, 1), candidate("b", 0.1, 0.5, 2, full=False)) == "b"
    assert picked("paper", candidate("a", 0.2, 0.5, 1), candidate("b", 0.1, 0.5, 2, status="eval_failed")) == "b"
    assert picked("full_eval", candidate("a", 0.2, 0.5, 1), candidate("b", 0.1, 0.5, 2, full=False),
                  candidate("c", 0.1, 0.5, 3, status="eval_failed")) == "a"
    assert choose([candidate("b", 0.1, 0.5, 2, full=False)], "full_eval") is None


def test_the_printed_ranking_follows_the_rule():
    nodes = [candidate("a", 0.2, 0.4, 1), candidate("b", 0.2, 0.6, 2), candidate("c", 0.1, 0.6, 3)]
    paper, full = ranking_lines(nodes, "paper"), ranking_lines(nodes, "full_eval")
    assert [line.split()[1] for line in paper[1:4]] == ["c", "a", "b"]
    assert [line.split()[1] for line in paper[5:8]] == ["b", "c", "a"]  # equal accuracy: archive order
    assert [line.split()[1] for line in full[1:4]] == ["c", "b", "a"]
    assert [line.split()[1] for line in full[5:8]] == ["c", "b", "a"]  # equal accuracy: lower MAE first


def test_generate_dir_packages_the_chosen_nodes_code(tmp_path):
    run = SyntheticRun(tmp_path)
    run.node("1", (0.30, 0.70))
    run.node("2", (0.10, 0.50), test=(0.12, 0.48))  # lowest MAE
    run.node("3", (0.10, 0.40))  # same MAE, lower accuracy
    run.node("4", (0.01, 0.99), full=False)  # only staged: not a candidate
    run.node("5", (0.00, 1.00), status="eval_failed")
    r = setup_repo("--generate_dir", str(run.dir), "--choose", "full_eval", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    top_mae = r.stdout.split("top")[1].splitlines()[1:4]
    assert [line.split()[1] for line in top_mae] == ["2", "3", "1"]
    top_acc = r.stdout.split("top")[2].splitlines()[1:4]
    assert [line.split()[1] for line in top_acc] == ["1", "2", "3"]
    package = tmp_path / "proofgrader_repo" / "proofgrader"
    assert "# node 2" in (package / "task_agent" / "task_agent.py").read_text()
    provenance = json.loads((package / "provenance.json").read_text())
    assert provenance["node_id"] == "2" and provenance["model"] == "openai/fake-task"
    assert provenance["chosen_by"] == "full_eval" and "chosen: node 2, by the full_eval rule" in r.stdout
    assert provenance["scores"]["test"]["normalized_mean_absolute_error"] == 0.12
    readme = (tmp_path / "proofgrader_repo" / "README.md").read_text()
    assert "| val | 0.500 | 0.100 |" in readme and "| test | 0.480 | 0.120 |" in readme
    assert "Default model: `openai/fake-task`, the model the run evaluated it with (the scores below)" in readme
    assert not (package.parent / "meta_agent").exists() and not list(package.rglob("*.csv"))


@pytest.mark.e2e
def test_best_the_paper_rule_and_full_eval_pick_different_nodes_of_one_run(tmp_path):
    run = SyntheticRun(tmp_path)
    run.node("1", (0.10, 0.40))  # the earliest of the lowest MAE: the paper's
    run.node("2", (0.10, 0.60))  # same MAE, more accurate: full_eval's
    run.node("3", (float("nan"), 1.00))  # no MAE to rank: neither rule's
    run.node("4", (0.30, 0.90))
    chosen = {}
    for choice in (None, "paper", "full_eval", "best"):
        dst = tmp_path / f"pkg-{choice}"
        r = setup_repo("--generate_dir", str(run.dir), "--dst", str(dst), *(["--choose", choice] if choice else []),
                       cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        provenance = json.loads((dst / "proofgrader" / "provenance.json").read_text())
        code = (dst / "proofgrader" / "task_agent" / "task_agent.py").read_text()
        assert f"# node {provenance['node_id']}\n" in code
        chosen[choice] = (provenance["node_id"], provenance["chosen_by"])
        top_mae = r.stdout.split("top")[1].splitlines()[1:4]
        assert "3" not in [line.split()[1] for line in top_mae]
    # best (the default): the most accurate of the nodes with a val MAE (3 has none), whatever its MAE.
    assert chosen == {None: ("4", "best"), "paper": ("1", "paper"), "full_eval": ("2", "full_eval"),
                      "best": ("4", "best")}


def test_generate_dir_refuses_a_run_without_a_fully_evaluated_node(tmp_path):
    run = SyntheticRun(tmp_path)
    run.node("1", (0.1, 0.9), full=False)
    for choice, why in (("paper", "no node has a val normalized MAE"),
                        ("full_eval", "no node finished the full imo_grading evaluation with a val normalized MAE")):
        r = setup_repo("--generate_dir", str(run.dir), "--choose", choice, cwd=tmp_path)
        assert r.returncode == 2 and why in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "proofgrader_repo").exists()
    r = setup_repo("--generate_dir", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and "not a run folder" in r.stderr


def test_choose_goes_with_generate_dir_only(tmp_path):
    r = setup_repo("--proofautograder", "--choose", "paper", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --choose goes with --generate_dir: it picks a node of the run"]
    r = setup_repo("--generate_dir", str(tmp_path), "--choose", "bestest", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --choose 'bestest': expected one of paper, full_eval, best, cheapest_within=D"]
    assert not (tmp_path / "proofgrader_repo").exists()


@pytest.mark.e2e
def test_a_grader_that_carries_grading_data_or_reaches_outside_is_refused(tmp_path):
    from domains.registry import get_domain

    answer = str(get_domain("imo_grading").load("train")["Response"].iloc[0])
    run = SyntheticRun(tmp_path)
    run.node("1", (0.1, 0.9), code=f"FEW_SHOT = {answer!r}\n")
    r = setup_repo("--generate_dir", str(run.dir), cwd=tmp_path)
    assert r.returncode == 2 and "contains the answer of imo_grading row" in r.stderr

    run = SyntheticRun(tmp_path / "second")
    run.node("1", (0.1, 0.9), code="import importlib\nimportlib.import_module('agent.llm')\n")
    r = setup_repo("--generate_dir", str(run.dir), cwd=tmp_path)
    assert r.returncode == 2 and "does not import on its own: ImportError: it imports agent," in r.stderr
    assert not (tmp_path / "proofgrader_repo").exists()


# -- a node in the HyperAgents reference's layout: task_agent.py beside agent/ ----------------------------------
MARKER = "MARKER-EVOLVED"  # what the evolved node put at the head of ProofAutoGrader's prompt
POINTS = {"incorrect": 0, "partial": 1, "almost": 6, "correct": 7}
# Replies and the label ProofAutoGrader reads from each: the first <points> block, 0/1/6/7 only, else "None".
REPLIES = {"Sound.\n<points>7 out of 7</points>": "correct", "<points>6 out of 7</points> <points>0</points>": "almost",
           "<points>1</points>": "partial", "<points>0 out of 7</points>": "incorrect",
           "<points>3 out of 7</points>": "None", "No score at all.": "None"}
GRADE_ALL = ("import json\nfrom proofgrader import grade\nfrom proofgrader.task_agent import TaskAgent\n"
             f"labels = [grade(**{GRADING_INPUTS!r}) for _ in range({len(REPLIES) - 1})]\n"
             f"labels.append(TaskAgent().forward({{'domain': 'imo_proof_grading', **{GRADING_INPUTS!r}}})[0])\n"
             "print(json.dumps(labels))")


def paper_layout_run(root: Path, code: str = "") -> SyntheticRun:
    """A run folder as the paper's BetterGrader run (`--initial_agent proofautograder --preset paper`) leaves it: its
    initial commit initial_agents/paper with ProofAutoGrader as the top-level task_agent.py, and node 1 (val MAE 0.1)
    that commit with MARKER at the head of the grading prompt (and `code` at the end of the file)."""
    from archive.eval_store import EvalStore
    from archive.records import Node
    from optimizer.initial_agents import on_paper
    from services.workspace import RunRepo, discard
    from support.cli import REPO_ROOT

    run = SyntheticRun(root)
    discard(run.dir / "repo")
    repo = RunRepo.create(run.dir / "repo", REPO_ROOT, prepare=on_paper("proofautograder").apply)
    workspace = repo.checkout(repo.node_commit("initial"), root / "workspace")
    source = workspace / "task_agent.py"
    source.write_text(source.read_text().replace("You are grading", f"{MARKER} You are grading", 1) + code)
    commit = repo.capture(workspace, repo.node_commit("initial"), "1").commit
    discard(workspace)
    key = EvalStore.key("1", "imo_grading", "val", 0, "synthetic")
    (run.dir / "evals" / key).mkdir(parents=True)
    (run.dir / "evals" / key / "report.json").write_text(json.dumps(
        {"overall_accuracy": 0.6, "normalized_mean_absolute_error": 0.1}))
    run.archive.record(Node("1", "initial", 1, commit=commit, full_eval={"imo_grading": True},
                            eval_keys={"imo_grading": {"val": key}}))
    return run


def grade_every_reply(fake_openai, package: Path, cwd: Path) -> list:
    """The labels the package at `package` (on PYTHONPATH) gives for REPLIES, in order: each through grade() but
    the last, through TaskAgent().forward()."""
    fake_openai.set_replies(list(REPLIES))
    env = {**cli_env(fake_openai), "PYTHONPATH": str(package)}
    r = subprocess.run([sys.executable, "-c", GRADE_ALL], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_a_node_whose_task_agent_is_a_top_level_task_agent_py_grades_as_the_packaged_default_layout(
        tmp_path, fake_openai):
    run = paper_layout_run(tmp_path)
    r = setup_repo("--generate_dir", str(run.dir), "--dst", str(tmp_path / "paper"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "chosen: node 1" in r.stdout
    package = tmp_path / "paper" / "proofgrader"
    code = (package / "task_agent.py").read_text()  # as in the node: beside agent/, the module proofgrader.task_agent
    assert MARKER in code and "from proofgrader.agent.base_agent import AgentSystem\n" in code
    assert code.rstrip().endswith("super().__init__(_model_for(model), chat_history_file)")
    tool_chat = (package / "agent" / "tool_chat.py").read_text()
    assert "from proofgrader.agent.llm import get_response_from_llm\n" in tool_chat
    assert (package / "agent" / "tools" / "editor.py").is_file()  # the tool loop imports every tool module
    assert not any((package / name).exists() for name in ("task_agent", "meta_agent.py", "README.md", "baselines"))
    assert json.loads((package / "provenance.json").read_text())["node_id"] == "1"
    r = setup_repo("--proofautograder", "--model", "openai/fake-task", "--dst", str(tmp_path / "default"),
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr

    paper = grade_every_reply(fake_openai, tmp_path / "paper", tmp_path)
    sent = [request["json"] for request in fake_openai.requests]
    assert paper == list(REPLIES.values()) == grade_every_reply(fake_openai, tmp_path / "default", tmp_path)
    assert len(sent) == len(REPLIES) and all(MARKER in s["messages"][-1]["content"] for s in sent)
    assert {(s["model"], s["temperature"], s["max_tokens"]) for s in sent} == {("fake-task", 0, 16384)}
    assert all(v in sent[0]["messages"][-1]["content"] for v in GRADING_INPUTS.values())


@pytest.mark.e2e
def test_a_top_level_task_agent_py_that_imports_what_the_package_leaves_behind_is_refused(tmp_path):
    run = paper_layout_run(tmp_path, code="\nimport meta_agent\n")  # beside it in the node, not in the package
    r = setup_repo("--generate_dir", str(run.dir), cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "does not import on its own: ModuleNotFoundError: No module named 'meta_agent'" in r.stderr
    assert not (tmp_path / "proofgrader_repo").exists()


def bettergrader_responder():
    """The fake provider as both models of the paper's BetterGrader run: the meta model puts MARKER in the grading
    prompt (one edit); the task model gives each row its label's points once MARKER is there, and 0 points before."""
    import pandas as pd

    from services.config import PROJECT_ROOT

    data = PROJECT_ROOT / "domains" / "imo" / "data"
    rows = [(r["Response"], r["Reward"].lower()) for split in ("train", "val")
            for r in pd.read_csv(data / f"gradingbench_filtered_100_{split}.csv").to_dict("records")]
    edit = {"tool_name": "editor", "tool_input": {"command": "str_replace", "path": "/workspace/task_agent.py",
                                                  "old_str": "You are grading", "new_str": f"{MARKER} You are grading"}}

    def respond(request: dict) -> str:
        messages = request["messages"]
        if "Change any part of the code base at `/workspace`" in str(messages[0]["content"]):
            first = not any(m["role"] == "assistant" for m in messages)
            return f"<json>{json.dumps(edit)}</json>" if first else "Done."
        prompt = str(messages[-1]["content"])
        label = next((label for answer, label in rows if answer in prompt), "incorrect")
        return f"<points>{POINTS[label] if MARKER in prompt else 0} out of 7</points>"

    return respond


@pytest.mark.e2e
def test_the_papers_bettergrader_run_packages_installs_and_grades(tmp_path, fake_openai):
    from support.cli import FAST_CONFIG, run_loop

    fake_openai.set_responder(bettergrader_responder())
    config = tmp_path / "paper.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  meta_timeout_s: 120\n")
    r = run_loop(tmp_path, fake_openai, "--preset", "paper", "--initial_agent", "proofautograder",
                 "--max_generation", "1", config=config, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    node = json.loads((run_dir / "nodes" / "1" / "node.json").read_text())
    assert node["full_eval"] == {"imo_grading": True} and node["scores"]["imo_grading"]["val"] == 1.0

    r = setup_repo("--generate_dir", str(run_dir), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "chosen: node 1" in r.stdout and "default model openai/fake" in r.stdout
    package = tmp_path / "proofgrader_repo"
    python = fresh_venv(tmp_path / "venv")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", str(package)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    shutil.rmtree(package)
    (elsewhere := tmp_path / "elsewhere").mkdir()
    env = cli_env(fake_openai)
    env.pop("PYTHONPATH", None)
    fake_openai.set_replies(["The key lemma is unproved.\n<points>1 out of 7</points>"])
    script = ("import json, proofgrader, proofgrader.task_agent as ta\n"
              f"print(json.dumps([proofgrader.grade(**{GRADING_INPUTS!r}), ta.__file__]))")
    r = subprocess.run([str(python), "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    label, location = json.loads(r.stdout.strip().splitlines()[-1])
    assert label == "partial" and location == str(next((tmp_path / "venv" / "lib").glob(
        "python3*/site-packages/proofgrader/task_agent.py")))  # the venv's copy, the module the node's task_agent.py
    sent = fake_openai.requests[-1]["json"]
    assert sent["model"] == "fake" and MARKER in sent["messages"][-1]["content"]  # node 1's grader, called directly
