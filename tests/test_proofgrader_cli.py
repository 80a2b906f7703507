"""setup_proofgrader_repo's command line: a bad input is one line and exit 2, never a traceback, from both of
its entry points (`python -m setup_proofgrader_repo` and the installed script, which runs main_cli)."""

import os
import subprocess
import sys

import pytest

ENTRIES = {"module": ["-m", "setup_proofgrader_repo"],
           "script": ["-c", "import setup_proofgrader_repo; setup_proofgrader_repo.main_cli()"]}  # pyproject's


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_missing_generate_dir_is_one_line_and_exit_2(tmp_path, entry):
    r = subprocess.run([sys.executable, *ENTRIES[entry], "--generate_dir", str(tmp_path / "no such run"), "--dst",
                        str(tmp_path / "pg")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: --generate_dir "), r.stderr
    assert "no such run" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "pg").exists()
