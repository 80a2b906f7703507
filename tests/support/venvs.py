"""Virtual environments a test makes, and pip run in them so that a failure shows pip's own words.

Whatever environment runs the tests (the README's `.venv` inside the checkout, or a system Python), a
test's environment sees that one's packages: `--system-site-packages` would show the *base*
interpreter's instead, which for a virtual environment lacks what was installed in it (a Debian
python3 has no `wheel`, and pip then fails with `invalid command 'bdist_wheel'`).
"""

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

PIP_TAIL_LINES = 30


def venv_with_these_packages(path: Path) -> Path:
    """A virtual environment at `path` that sees the packages of the one running the tests (pip, setuptools,
    wheel, the project's dependencies) through plain path entries, which run none of their .pth files:
    the project's own editable install stays out, as if it were not installed. Its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=300)
    site = next((path / "lib").glob("python3*/site-packages"))
    paths = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "tests_environment.pth").write_text("".join(f"{p}\n" for p in paths))
    return path / "bin" / "python"


def pip_install(python: Path, *args: str, timeout: float = 300) -> None:
    """`python -m pip install ARGS`, offline; on failure the test fails with pip's last lines, where
    `check=True` showed only the command."""
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", *args], capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()[-PIP_TAIL_LINES:]
        pytest.fail(f"pip install {' '.join(args)} exited with {done.returncode}; its last lines:\n" + "\n".join(said),
                    pytrace=False)
