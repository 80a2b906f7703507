"""`python -m apps.export RUN --node best|ID --out DIR`: a node's agent code as a folder, its change from
the initial agent as a patch that applies, and what it is (export.json, README.md)."""

import json
import os
import subprocess
import sys

import pytest

from apps.export import export, main
from archive.store import Archive
from services.errors import UserError
from services.workspace import RunRepo
from support.cli import REPO_ROOT
from support.synthetic_run import make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A synthetic run of 12 nodes whose best node is a child (not the initial node)."""
    for seed in range(20):
        folder = tmp_path_factory.mktemp("run") / "run"
        made = make_run(folder, nodes=12, seed=seed)
        if made["best"] != "initial":
            return folder, made
    raise AssertionError("no seed gave a run whose best node is a child")


def files_of(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_best_node_is_exported_as_code_a_patch_and_its_facts(run, tmp_path, capsys):
    run_dir, made = run
    out = tmp_path / "best"
    main([str(run_dir), "--out", str(out)])
    said = capsys.readouterr().out
    assert said.startswith(f"exported the run's best node (loop.best_choice: highest), node {made['best']} of ")
    assert sorted(os.listdir(out)) == ["README.md", "changes.patch", "code", "export.json"]
    node = Archive(run_dir).nodes[made["best"]]
    repo = RunRepo(run_dir / "repo")
    expected = repo.checkout(node.commit, tmp_path / "expected")
    assert files_of(out / "code") == files_of(expected)
    facts = json.loads((out / "export.json").read_text())
    assert facts["node"] == made["best"] and facts["commit"] == node.commit and facts["run"] == str(run_dir)
    assert facts["initial_commit"] == Archive(run_dir).nodes["initial"].commit
    assert facts["scores"]["imo_grading"]["val"]["score"] == node.scores["imo_grading"]["val"]
    assert facts["files"] == len(files_of(expected))
    assert f"# Node {made['best']} of the run run" in (out / "README.md").read_text()
    # The patch turns the initial agent's code into the node's.
    initial = repo.checkout(facts["initial_commit"], tmp_path / "initial")
    applied = subprocess.run(["git", "apply", str(out / "changes.patch")], cwd=initial,
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert files_of(initial) == files_of(expected)


def test_a_node_named_by_id_and_the_command_line(run, tmp_path):
    run_dir, made = run
    other = next(n for n in made["nodes"] if n not in (made["best"], "initial")
                 and Archive(run_dir).nodes[n].commit is not None)
    r = subprocess.run([sys.executable, "-m", "apps.export", str(run_dir), "--node", other, "--out",
                        str(tmp_path / "x")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 0, r.stderr
    assert f"node {other}, named with --node" in r.stdout
    assert json.loads((tmp_path / "x" / "export.json").read_text())["node"] == other
    r = subprocess.run([sys.executable, "-m", "apps.export", str(run_dir), "--node", "nope", "--out",
                        str(tmp_path / "y")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "--node 'nope': no such node" in r.stderr and not (tmp_path / "y").exists()


def test_a_folder_that_is_not_empty_is_refused_unless_forced(run, tmp_path):
    run_dir, made = run
    out = tmp_path / "out"
    (out / "code" / "stale").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="is not empty: pass --force"):
        export(run_dir, "best", out)
    assert sorted(os.listdir(out)) == ["code", "notes.txt"]
    facts = export(run_dir, "best", out, force=True)
    assert facts["node"] == made["best"] and (out / "notes.txt").read_text() == "mine"
    assert not (out / "code" / "stale").exists() and (out / "code" / "task_agent").is_dir()
    export(run_dir, "initial", out, force=True)  # again over its own export
    assert json.loads((out / "export.json").read_text())["node"] == "initial"
    assert (out / "changes.patch").read_text() == ""


def test_what_cannot_be_exported_is_one_line(run, tmp_path):
    run_dir, _ = run
    with pytest.raises(UserError, match="not a run folder"):
        export(tmp_path, "best", tmp_path / "a")
    evaluation = next((run_dir / "evals").iterdir())  # a harness evaluation folder's shape
    with pytest.raises(UserError, match="an evaluation folder of domains.harness"):
        export(evaluation, "best", tmp_path / "b")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is not a folder"):
        export(run_dir, "best", tmp_path / "file")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
