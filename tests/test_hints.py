"""The commands the project prints as advice work: each is run as printed, or parsed by its entry point's parser.

`python -m domains.report --dname RUN` on a loop run of a spec domain used to advise
`python -m domains.harness --domain capitals`, which stops with "unknown domain": a spec domain is named
by its file. Each hint of domains.report is run here as printed, and so are run_optimization's on a harness
folder, the dashboard's note on evaluation folders and the measure a proofgrader package's README gives. The
other commands printed in messages (`python -m ...` in the core's f-strings) are parsed by their entry point's
own parser, with the values a message puts in them.
"""

import csv
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from services.cli_parser import ArgumentParser
from support.cli import FAST_CONFIG, REPO_ROOT, cli_env, run_cli

EXAMPLE = REPO_ROOT / "examples" / "capitals"


def answer(request: dict) -> str:
    return '<json>{"response": "Paris"}</json>'


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    return r.stderr.strip()


def commands_in(line: str) -> list[str]:
    return re.findall(r"`(python -m [^`]+)`", line)


def run_as_printed(command: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """`command` as a person pastes it into a shell in `cwd`, `python` being this interpreter."""
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], command
    return subprocess.run([sys.executable, *argv[1:]], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def capitals_run(tmp_path_factory, fake_openai_session):
    """A loop run of the README's spec domain (the initial node's evaluations only), its spec, the provider's env."""
    root = tmp_path_factory.mktemp("hints")
    shutil.copytree(EXAMPLE, root / "my_task")
    config = root / "c.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  eval_samples: 6\n")
    fake_openai_session.set_responder(answer)
    env = cli_env(fake_openai_session)
    r = run_cli("run_optimization", "--domain_spec", str(root / "my_task" / "capitals.yaml"), "--max_generation", "0",
                "--output_dir", str(root / "out"), "--run_id", "run", "--task_model", "openai/fake", "--meta_model",
                "openai/fake-meta", "--config", str(config), env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return root, root / "my_task" / "capitals.yaml", env


@pytest.mark.e2e
def test_the_report_of_a_loop_run_names_commands_that_work(capitals_run, fake_openai):
    root, spec, env = capitals_run
    line = one_line_error(run_cli("domains.report", "--domain_spec", str(spec), "--dname", str(root / "out" / "run"),
                                  env=env))
    commands = commands_in(line)
    assert [c.split()[2] for c in commands] == ["apps.analyze", "domains.report"], line
    assert f"--domain_spec {spec}" in commands[1]
    for command in commands:
        r = run_as_printed(command, env, root)
        assert r.returncode == 0, (command, r.stderr[-3000:])
    assert "accuracy" in r.stdout  # the evaluation it named was scored


@pytest.mark.e2e
def test_the_report_of_a_missing_or_stopped_harness_run_names_the_harness_command_that_makes_it(capitals_run,
                                                                                                  fake_openai):
    root, spec, env = capitals_run
    fake_openai.set_responder(answer)
    folder = root / "out" / "h"
    report = ("domains.report", "--domain_spec", str(spec), "--dname", str(folder))
    [make] = commands_in(one_line_error(run_cli(*report, env=env)))
    assert make.startswith(f"python -m domains.harness --domain_spec {spec} ")
    made = run_as_printed(make, env, root)
    assert made.returncode == 0, made.stderr[-3000:]
    assert run_cli(*report, env=env).returncode == 0

    (folder / "predictions.csv").unlink()  # as a harness run stopped before it wrote them: its journal is there
    [finish] = commands_in(one_line_error(run_cli(*report, env=env)))
    assert "--resume_from" in finish
    finished = run_as_printed(finish, env, root)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert run_cli(*report, env=env).returncode == 0


def grade(request: dict) -> str:
    return '<json>{"response": "Partial"}</json>'


@pytest.fixture
def grading_eval(tmp_path, fake_openai):
    """A harness evaluation of imo_grading's first val rows (not the domain's default split, train) in a folder
    whose name needs quoting in a shell, and the provider's env."""
    fake_openai.set_responder(grade)
    env = cli_env(fake_openai)
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    r = run_cli("domains.harness", "--domain", "imo_grading", "--subset", "val", "--num_samples", "3", "--output_dir",
                str(tmp_path / "out"), "--run_id", "val h", "--model", "openai/fake", "--config", str(config), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "out" / "val h", env


@pytest.mark.e2e
def test_run_optimization_on_a_harness_folder_names_the_harness_command_that_finishes_it(grading_eval, fake_openai):
    folder, env = grading_eval
    fake_openai.set_responder(grade)
    lines = (folder / "predictions.jsonl").read_text().splitlines(keepends=True)
    asked = sorted(str(json.loads(line)["id"]) for line in lines)
    (folder / "predictions.jsonl").write_text(lines[0])  # as a run stopped by its budget after one row
    (folder / "predictions.csv").unlink()
    [finish] = commands_in(one_line_error(run_cli("run_optimization", "--resume_from", str(folder), env=env)))
    finished = run_as_printed(finish, env, folder.parent)
    assert finished.returncode == 0, (finish, finished.stderr[-3000:])
    with open(folder / "predictions.csv", newline="") as f:
        done = sorted(row["Grading ID"] for row in csv.DictReader(f))
    assert done == asked and len(done) == 3  # the run's own split and rows, not the domain's default ones


@pytest.mark.e2e
def test_the_dashboards_note_scores_an_evaluation_folder_as_printed(grading_eval):
    from apps.dashboard.evaluations import evaluations_table, read_evaluation

    folder, env = grading_eval
    listed = read_evaluation(folder.name, folder)
    [command] = re.findall(r"<code>(python -m [^<]+)</code>", str(evaluations_table([listed])))
    command = command.replace("DOMAIN", shlex.quote(listed.facts["domain"])).replace("FOLDER", shlex.quote(str(folder)))
    r = run_as_printed(command, env, folder.parent)
    assert r.returncode == 0, (command, r.stderr[-3000:])
    assert json.loads((folder / "report.json").read_text())["domain"] == "imo_grading"


@pytest.mark.e2e
def test_the_proofgrader_readme_measures_the_package_as_printed(tmp_path, fake_openai):
    fake_openai.set_responder(lambda request: "Step 2 has a gap.\n<points>6 out of 7</points>")
    env = cli_env(fake_openai)
    built = run_cli("setup_proofgrader_repo", "--proofautograder", "--model", "openai/fake-grader", "--dst",
                    str(tmp_path / "pg"), env=env, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    measure = commands_in((tmp_path / "pg" / "README.md").read_text())
    assert [c.split()[2] for c in measure] == ["domains.harness", "domains.report"], measure
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path / "pg"), env.get("PYTHONPATH")) if p)  # installed
    for command in measure:
        r = run_as_printed(command, env, tmp_path)
        assert r.returncode == 0, (command, r.stderr[-3000:])
    assert "accuracy" in r.stdout


def test_a_group_of_runs_is_named_to_archive_analyze(tmp_path):
    from domains.report import no_predictions

    (tmp_path / "group.json").write_text("{}")
    [command] = commands_in(no_predictions(tmp_path, "capitals", "--domain_spec x.yaml"))
    assert command == f"python -m apps.analyze {tmp_path}"


class Parsed(Exception):
    pass


def parsed(monkeypatch, command: str):
    """The namespace `command`'s entry point parses it into; nothing runs past its parser."""
    argv = shlex.split(command)
    module = argv[2] if argv[:2] == ["python", "-m"] else argv[0]
    original = ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(ArgumentParser, "parse_args", parse_only)
    entry = importlib.import_module(module)
    if hasattr(entry, "__path__"):  # a package: `python -m` runs its __main__
        entry = importlib.import_module(f"{module}.__main__")
    try:
        entry.main(argv[3:] if module != argv[0] else argv[1:])
    except Parsed as e:
        return e.args[0]
    except SystemExit as e:
        pytest.fail(f"{command}: its parser refused it (exit {e.code})")
    pytest.fail(f"{command}: its entry point parsed no command line")


# Each command a message prints (file: the message), with the values the message fills in.
PRINTED = {
    "apps/analyze.py: a run whose test split was not evaluated":
        "python -m run_optimization --resume_from /runs/r --final_test",
    "archive/run_groups.py: a replicate that has not started": "python -m run_optimization --resume_from /runs/g/s1",
    "run_optimization.py: a group's replicate failed": "python -m run_optimization --resume_from /runs/g",
    "run_optimization.py: a group's analysis": "python -m apps.analyze /runs/g",
    "run_optimization.py and apps/report.py: the dashboard": "python -m apps.dashboard /runs/g",
    "apps/export.py: the exported folder's README": "python -m run_optimization --initial_agent /x/code",
    "domains/data.py: a data file whose checksum changed": "python -m domains.imo.setup",
    "services/sandbox (check, docker backend): the image is missing": "python -m services.sandbox build-image",
    "setup_proofgrader_repo.py: the package README's measure": (
        "python -m domains.harness --domain imo_grading --subset val --agent_path proofgrader.task_agent "
        "--output_dir outputs --run_id proofgrader_val"),
    "setup_proofgrader_repo.py: the package README's score": (
        "python -m domains.report --domain imo_grading --dname outputs/proofgrader_val"),
    "domains/scoring.py: no proofgrader installed": "setup_proofgrader_repo --proofautograder",
    "optimizer/launch.py: --resume_from a harness folder": "python -m domains.harness --resume_from /runs/h",
    "services/coding_agents: the meta agent a run chose is not installed": "python -m services.install --coding-agents",
    "apps/dashboard/evaluations.py: the evaluations' note": (
        "python -m domains.report --domain DOMAIN --dname FOLDER"),
}


@pytest.mark.parametrize("where", sorted(PRINTED))
def test_a_printed_command_parses_with_its_entry_points_parser(monkeypatch, where):
    parsed(monkeypatch, PRINTED[where])


def test_the_printed_commands_are_the_ones_in_the_messages():
    """Each command of PRINTED is still what its message prints (a message that changes its command is
    checked again here), with the values the message fills in left out."""
    core = "\n".join(p.read_text() for top in ("services", "domains", "archive", "optimizer", "apps")
                     for p in (REPO_ROOT / top).rglob("*.py"))
    core += "\n".join(p.read_text() for p in REPO_ROOT.glob("*.py"))
    flat = re.sub(r'"\s*\n\s*f?"', "", core)  # the message's literal pieces joined
    for where, command in PRINTED.items():
        fixed = [part for part in re.split(r" /\S+", command) if part]  # the parts no value fills in
        assert all(part.strip() in flat for part in fixed), (where, command)


def test_the_pip_extras_a_message_names_are_the_projects():
    extras = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    core = "\n".join(p.read_text() for top in ("services", "domains", "archive", "optimizer", "apps", ".")
                     for p in (REPO_ROOT / top).glob("**/*.py" if top != "." else "*.py"))
    named = {name for group in re.findall(r"""pip install -e ['"]?\.\[([\w,]+)\]""", core) for name in group.split(",")}
    assert named and named <= extras, named - extras
