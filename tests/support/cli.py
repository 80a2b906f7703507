"""Running the project's commands as a user does: `python -m ...` in a subprocess whose provider is
a fake server (support.fake_openai), with a config that keeps retries and saves quick."""

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli_env(fake, **extra) -> dict:
    """Environment for a CLI subprocess whose provider is the fake server."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE", "_BASE_URL"))}
    env.update(OPENAI_API_BASE=fake.base_url, OPENAI_API_KEY="sk-provider-secret-0123456789",
               LITELLM_LOCAL_MODEL_COST_MAP="True", **extra)
    return env


def run_cli(*args, env=None, cwd=REPO_ROOT, timeout=180):
    """Run `python -m ...` from the repository root; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def run_cli_without(modules: tuple[str, ...], *args, env=None, cwd=REPO_ROOT, timeout=180):
    """`run_cli` in an interpreter where `modules` are not installed, whatever this environment holds (the
    README's proof steps install `proofgrader`): None in sys.modules is how Python marks a module that cannot
    be imported; `import` raises ModuleNotFoundError for it and importlib.util.find_spec answers None."""
    code = ("import runpy, sys\n"
            f"sys.modules.update(dict.fromkeys({list(modules)!r}))\n"
            f"runpy.run_module({args[0]!r}, run_name='__main__', alter_sys=True)\n")
    return subprocess.run([sys.executable, "-c", code, *args[1:]], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def run_loop(tmp_path, fake, *args, config, domains=("imo_grading",), env=None, timeout=600):
    """`python -m run_optimization` into tmp_path/out/run, the task and meta models on the fake provider."""
    return run_cli("run_optimization", "--domain", *domains, "--output_dir", str(tmp_path / "out"),
                   "--run_id", "run", "--task_model", "openai/fake", "--meta_model", "openai/fake-meta",
                   "--config", str(config), *args, env=env or cli_env(fake), timeout=timeout)


FAST_CONFIG = """
gateway:
  backoff_base_s: 0.01
  backoff_max_s: 0.05
harness:
  save_interval: 1000
sandbox:
  backend: bwrap
"""


def backend_config(path: Path, backend: str, loop: str = "") -> Path:
    """FAST_CONFIG written to `path` with sandbox `backend` and, when given, the lines of a `loop:` section."""
    path.write_text(FAST_CONFIG.replace("backend: bwrap", f"backend: {backend}") + (f"loop:\n{loop}" if loop else ""))
    return path
