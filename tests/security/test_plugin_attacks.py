"""Installed packages' metadata is its writers', not this project's: the search's plug-in names are read from it
(services/strategy_names.py) by every command, so a package whose entry_points.txt does not parse, a plug-in
named with terminal escapes, or a strategy that raises as it is looked at must never break a command."""

import os

import pytest

from support.cli import REPO_ROOT, run_cli


def with_plugin(env: dict, site) -> dict:
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}


@pytest.mark.attack("an installed package's entry_points.txt that does not parse, a parent selection plug-in named "
                    "with terminal escapes, and one whose strategy raises as it is checked: --help and a dry run")
def test_broken_or_oddly_named_plug_ins_never_break_a_command(tmp_path):
    """Entry points are installed packages' metadata, whoever wrote it: a package whose entry_points.txt does not
    parse, a plug-in named with terminal escapes, and one whose strategy raises as it is looked at."""
    site = tmp_path / "site"
    for name, entry_points in (("broken", "[console_scripts]\nno equals sign here\n"),
                               ("odd", "[hyperagents_imo.parent_selection]\nesc\x1b]0;PWNED\x07 = odd_mod:Odd\n"),
                               ("raising", "[hyperagents_imo.parent_selection]\npropraises = raising_mod:Raises\n")):
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(entry_points)
    (site / "raising_mod.py").write_text(
        "class Raises:\n    needs_rows = False\n    @property\n    def weights(self):\n"
        "        raise RuntimeError('looked at')\n    def choose(self, candidates, rng, context):\n"
        "        return candidates[0]\n")
    env = with_plugin({**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, site)
    usage = run_cli("run_optimization", "--help", env=env)
    assert usage.returncode == 0 and "\x1b" not in usage.stdout and "propraises" in usage.stdout, usage.stderr
    r = run_cli("run_optimization", "--domain", "imo_grading", "--parent_selection", "propraises", "--dry_run",
                "--output_dir", str(tmp_path), env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "plug-in propraises (raising_mod:Raises" in r.stderr and "RuntimeError: looked at" in r.stderr
