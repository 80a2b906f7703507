"""Search strategies from outside the project (issue 38): tests/plugins/oldest_parent and tests/plugins/above_half,
packages as someone would publish them, are installed with pip into a folder of the test's own and put on the
path of a real run, which chooses parents (`--parent_selection oldest`), promotes children
(`--set loop.promotion=above_half`) or screens them for novelty (`--set loop.novelty_measure=all_alike`) with them
by name as with a bundled strategy: the command line offers it,
the config accepts it, the plan names it, and every parent_chosen event of the run's log, or every screening
verdict of its nodes, is its. A plug-in whose object lacks a strategy's methods, and a name no strategy has, are
one line each."""

import os
import shutil
import sys

import pytest

from support.cli import REPO_ROOT, cli_env, run_cli, run_loop
from support.scripted_loop import IMPROVE, events, loop_config, nodes, responder
from support.venvs import PIP_TAIL_LINES

PLUGINS = ("oldest_parent", "above_half", "all_alike")  # folders of tests/plugins/


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """A folder holding the plug-ins as pip installs them (their modules and dist-infos with the entry points)."""
    import subprocess

    tmp = tmp_path_factory.mktemp("plugin")
    sources = [tmp / "source" / name for name in PLUGINS]
    for name, source in zip(PLUGINS, sources):  # pip builds in the source folder: a copy, not the checkout's
        shutil.copytree(REPO_ROOT / "tests" / "plugins" / name, source)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                           "--no-build-isolation", "--target", str(tmp / "site"), *map(str, sources)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail("pip install of the plug-ins failed:\n" + "\n".join(
            (done.stdout + done.stderr).splitlines()[-PIP_TAIL_LINES:]), pytrace=False)
    for name in PLUGINS:
        assert next((tmp / "site").glob(f"{name}-0.1.dist-info/entry_points.txt")).is_file()
    return tmp / "site"


def with_plugin(env: dict, site) -> dict:
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}


@pytest.mark.e2e
def test_a_run_chooses_its_parents_with_an_installed_plug_in_by_name(tmp_path, fake_openai, plugin_site):
    env = with_plugin(cli_env(fake_openai), plugin_site)
    usage = run_cli("run_optimization", "--help", env=env)
    assert "oldest" in usage.stdout and "score_child_prop" in usage.stdout
    fake_openai.set_responder(responder({1: [IMPROVE], 2: [IMPROVE]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "3", "--parent_selection", "oldest", "--seed", "1",
                 config=loop_config(tmp_path), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "parent selection oldest" in r.stdout
    run_dir = tmp_path / "out" / "run"
    picks = {e["generation"]: e for e in events(run_dir) if e["event"] == "parent_chosen"}
    assert sorted(picks) == [1, 2, 3] and all(p["strategy"] == "oldest" and p["parent"] == "initial"
                                              for p in picks.values())
    assert all(p["candidates"]["initial"]["p"] == 1.0 for p in picks.values())
    assert len([n for n in nodes(run_dir).values() if n["status"] == "ok"]) >= 2  # children were scored
    assert all(n["parent"] in (None, "initial") for n in nodes(run_dir).values())


@pytest.mark.e2e
def test_a_run_promotes_its_children_with_an_installed_plug_in_by_name(tmp_path, fake_openai, plugin_site):
    env = with_plugin(cli_env(fake_openai), plugin_site)
    fake_openai.set_responder(responder({1: [IMPROVE], 2: [IMPROVE]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "2", "--set", "loop.promotion=above_half", "--seed", "1",
                 config=loop_config(tmp_path), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "and above half of the rows right (above_half)" in r.stdout
    children = [n for n in nodes(tmp_path / "out" / "run").values() if n["parent"] is not None]
    verdicts = [line for n in children for lines in n["screening"].values() for line in lines]
    assert len(children) == 2 and verdicts and all("; above_half: " in line for line in verdicts), verdicts
    assert any(line.endswith("above_half: 1.00 > 0.5") and ": on: " in line for line in verdicts), verdicts


@pytest.mark.e2e
def test_a_run_screens_for_novelty_with_an_installed_plug_in_by_name(tmp_path, fake_openai, plugin_site):
    # Two different edits: the default measure (dice) finds nothing in common, the plug-in all_alike everything.
    second = {"tool_name": "bash", "tool_input": {"command": "echo '# a second idea' >> "
                                                             "/workspace/task_agent/task_agent.py"}}
    env = with_plugin(cli_env(fake_openai), plugin_site)
    statuses = {}
    for measure in ("dice", "all_alike"):
        fake_openai.set_responder(responder({1: [IMPROVE], 2: [second]}, []))
        r = run_loop(tmp_path / measure, fake_openai, "--max_generation", "2", "--parent_selection", "latest",
                     "--set", "loop.novelty_threshold=0.9", "--set", f"loop.novelty_measure={measure}",
                     config=loop_config(tmp_path), env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        statuses[measure] = {k: n["status"] for k, n in nodes(tmp_path / measure / "out" / "run").items()}
    assert statuses["dice"] == {"initial": "ok", "1": "ok", "2": "ok"}
    assert statuses["all_alike"] == {"initial": "ok", "1": "ok", "2": "duplicate"}


def test_a_plug_in_without_a_strategys_methods_and_an_unknown_name_are_one_line_each(tmp_path, plugin_site):
    env = with_plugin({**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, plugin_site)
    for name, said in (("broken", "plug-in broken (oldest_parent:NotAStrategy, entry point group "
                                  "hyperagents_imo.parent_selection) gave NotAStrategy, which lacks what a parent "
                                  "selection strategy has"),
                       ("no_such", "loop.parent_selection")):
        r = run_cli("run_optimization", "--domain", "imo_grading", "--set", f"loop.parent_selection={name}",
                    "--dry_run", "--output_dir", str(tmp_path), env=env, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
