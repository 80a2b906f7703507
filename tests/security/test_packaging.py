"""Packaging an evolved grader: `setup_proofgrader_repo --generate_dir` loads its code only in a sandbox."""

from pathlib import Path

import pytest

from services.errors import UserError
from support.proofgrader_runs import SyntheticRun, setup_repo

PAYLOAD = """
import os
for _path in (MARKER, "/tmp/hyperagents-packaging-marker"):
    try:
        open(_path, "w").write(str(os.getuid()))
    except OSError:
        pass
"""


@pytest.mark.attack("evolved grader: code that runs when the package is imported, at packaging time")
def test_the_import_check_runs_the_evolved_code_in_a_sandbox(tmp_path):
    marker = tmp_path / "ran_on_the_host"
    run = SyntheticRun(tmp_path)
    run.node("1", (0.1, 0.9), code=PAYLOAD.replace("MARKER", repr(str(marker))))
    r = setup_repo("--generate_dir", str(run.dir), "--dst", str(tmp_path / "pg"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ran_on_the_host" in (tmp_path / "pg" / "proofgrader" / "task_agent" / "task_agent.py").read_text()
    assert not marker.exists()
    assert not Path("/tmp/hyperagents-packaging-marker").exists()


# Code that runs at import and rewrites the package it belongs to, as `pip install -e` would later
# run it on the host: a setup.py that runs a command, and a pyproject.toml that points at it.
REWRITE = """
import os, pathlib
for _root in ("/workspace", str(pathlib.Path(__file__).resolve().parents[2])):
    try:
        with open(os.path.join(_root, "setup.py"), "w") as _f:
            _f.write("import os\\nos.system('touch /tmp/hyperagents-packaging-setup-ran')\\n")
        with open(os.path.join(_root, "pyproject.toml"), "a") as _f:
            _f.write("\\n# planted at import\\n")
    except OSError:
        pass
"""


@pytest.mark.attack("evolved grader: code that writes setup.py and edits pyproject.toml of its own package when "
                    "imported at packaging time")
def test_the_import_check_cannot_change_the_built_package(tmp_path):
    run = SyntheticRun(tmp_path)
    run.node("1", (0.1, 0.9), code=REWRITE)
    r = setup_repo("--generate_dir", str(run.dir), "--dst", str(tmp_path / "pg"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    built = tmp_path / "pg"
    assert "planted at import" in (built / "proofgrader" / "task_agent" / "task_agent.py").read_text()
    assert not (built / "setup.py").exists()
    assert "planted" not in (built / "pyproject.toml").read_text()


# With the sandbox backend none, the import check is a plain subprocess: code that finds the
# staging folder beside the destination can write there. The build must notice and keep nothing.
REACH_STAGING = """
import pathlib
for _staging in pathlib.Path(PARENT).glob(".pg-*"):
    (_staging / "setup.py").write_text("import os\\n")
"""


def test_a_package_changed_during_its_import_check_is_not_kept(tmp_path, monkeypatch):
    import setup_proofgrader_repo as spr
    from services import config as config_module

    config = tmp_path / "default.yaml"
    config.write_text("sandbox:\n  backend: none\n")
    monkeypatch.setattr(config_module, "DEFAULT_CONFIG", config)
    run = SyntheticRun(tmp_path)
    run.node("1", (0.1, 0.9), code=REACH_STAGING.replace("PARENT", repr(str(tmp_path))))
    (tmp_path / "src").mkdir()
    with pytest.raises(UserError, match="changed setup.py of the built folder"):
        spr.build(spr.from_run(run.dir, tmp_path / "src"), tmp_path / "pg", force=False)
    assert not (tmp_path / "pg").exists() and not list(tmp_path.glob(".pg-*"))


@pytest.mark.parametrize("saved, why", [
    ("{not json", "run.json: not valid JSON"),
    ('["imo_grading"]', "expected a JSON object"),
    ('{"domains": "imo_grading", "config": {}}', "domains must be"),
    ('{"domains": ["imo_grading"], "config": {}, "next": 1}', "unknown keys next"),
])
def test_a_run_json_the_loop_did_not_write_is_one_line(tmp_path, saved, why):
    run = SyntheticRun(tmp_path)
    (run.dir / "run.json").write_text(saved)
    r = setup_repo("--generate_dir", str(run.dir), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not a run folder" in r.stderr and why in r.stderr
    assert not (tmp_path / "proofgrader_repo").exists()
