"""bench/local_model.py at its smallest: it reaches the local model's server with the server's key (a 401
without it) and fits its long prompt to a small context."""

import os
import subprocess
import sys

import pytest

from support.cli import REPO_ROOT


@pytest.mark.e2e
def test_the_bench_runs_at_its_smallest_settings():
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    r = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "local_model.py"), "--samples", "0", "--context",
                        "512"], env={**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [line.split(":")[0] for line in r.stdout.splitlines() if line.startswith("threads ")] == \
        ["threads 1", f"threads {os.cpu_count()}"]
    assert "sample 0: " in r.stdout and "peak RSS of this process" in r.stdout
