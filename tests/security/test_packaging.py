"""Packaging an evolved grader: `setup_proofgrader_repo --generate_dir` loads its code only in a sandbox."""

from pathlib import Path

import pytest
from test_proofgrader import SyntheticRun, setup_repo

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
