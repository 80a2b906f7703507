"""The sandbox on a newcomer's machine, and what a killed run leaves behind."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from services.config import SandboxConfig
from services.sandbox.bwrap import CGROUP_PREFIX, BwrapSandbox, _pids_cgroup_root
from support.backends import BACKENDS
from support.cli import REPO_ROOT
from support.venvs import pip_install, venv_with_these_packages

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)


def test_a_python_installed_under_tmp_runs_sandboxed_code(tmp_path_factory):
    """A virtualenv made under /tmp: bwrap's private /tmp used to hide its interpreter."""
    venv = Path("/tmp") / f"venv-{os.getpid()}-{time.monotonic_ns()}"
    python = venv_with_these_packages(venv)
    try:
        code = textwrap.dedent(f"""
            import sys, tempfile
            sys.path.insert(0, {str(REPO_ROOT)!r})
            from pathlib import Path
            from services.sandbox.bwrap import BwrapSandbox
            with tempfile.TemporaryDirectory() as ws, BwrapSandbox(Path(ws)) as box:
                r = box.run([box.python, "-c", "import sys; print(sys.prefix)"], box.base_env(), timeout=60)
            print(r.stdout.strip(), r.stderr.strip()[-300:])
        """)
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
        assert out.stdout.split()[:1] == [str(venv)], out.stdout + out.stderr
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=True)


@pytest.mark.skipif(os.geteuid() != 0 or _pids_cgroup_root() is None, reason="pids cgroups are made only as root")
def test_the_pids_cgroup_of_a_killed_run_is_removed_by_the_next_one(tmp_path):
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from pathlib import Path
        from services.sandbox.bwrap import BwrapSandbox
        box = BwrapSandbox(Path({str(tmp_path)!r})).open()
        print(box._cgroup.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL
    left = Path(out.stdout.strip())
    assert left.name.startswith(CGROUP_PREFIX) and left.is_dir()
    with BwrapSandbox(tmp_path, SandboxConfig()) as box:
        assert box._cgroup.path != left
    assert not left.exists()


SKIPPED = shutil.ignore_patterns(".git", "outputs", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                 "proofgrader_repo")


def not_the_project(folder: str, names: list[str]) -> set[str]:
    """What a copy of the checkout leaves out: what git ignores, and any virtual environment (the README's
    .venv, whatever its name), whose links copytree would follow into gigabytes."""
    return set(SKIPPED(folder, names)) | {name for name in names if (Path(folder) / name / "pyvenv.cfg").is_file()}


@pytest.fixture(scope="module")
def installed_copy():
    """The framework installed the ordinary way (not editable) in a virtualenv: its data sets,
    labels included, are then package data in site-packages, which sandboxes see."""
    venv = Path("/tmp") / f"venv-installed-{os.getpid()}"
    source = Path("/tmp") / f"source-{os.getpid()}"  # a copy: building in the checkout would leave build/ there
    shutil.copytree(REPO_ROOT, source, ignore=not_the_project)
    python = venv_with_these_packages(venv)
    try:
        pip_install(python, "--no-deps", "--no-build-isolation", str(source))
        yield venv
    finally:
        subprocess.run(["rm", "-rf", str(venv), str(source)], check=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.attack("task agent: reads the labels of an installed (not editable) copy of the framework in "
                    "site-packages")
def test_an_installed_copy_of_the_core_is_hidden_in_the_sandbox(installed_copy, backend, tmp_path):
    code = textwrap.dedent(f"""
        import glob, site, tempfile
        from pathlib import Path
        from services.config import SandboxConfig
        from services.sandbox import open_sandbox
        site_packages = site.getsitepackages()[0]
        assert site_packages.startswith({str(installed_copy)!r})
        look = f"import glob; print(len(glob.glob({{site_packages!r}} + '/domains/**/*.csv', recursive=True)))"
        with open_sandbox(SandboxConfig(backend={backend!r}), Path({str(tmp_path)!r})) as box:
            r = box.run([box.python, "-c", look], box.base_env(), timeout=60)
        print(len(glob.glob(site_packages + "/domains/**/*.csv", recursive=True)), r.stdout.strip() or r.stderr)
    """)
    out = subprocess.run([str(installed_copy / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         timeout=120, cwd="/")
    on_host, inside = out.stdout.split(maxsplit=1) if out.stdout else ("", out.stderr)
    assert int(on_host) >= 6, out.stdout + out.stderr  # the labels are there on the host...
    assert inside.strip() == "0"  # ...and not in the sandbox


FILL = {"bytes": "for i in range(100):\n    open(f'/workspace/f{i}', 'wb').write(b'x' * 2**20)",
        "files": "import os\nos.makedirs('/workspace/d')\n"
                 "for i in range(5000):\n    open(f'/workspace/d/{i}', 'w').close()"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fill", sorted(FILL))
@pytest.mark.attack("agent code: fills the host's disk through its writable folders (many files, or many bytes "
                    "in files under the size limit)")
def test_writing_too_much_to_the_sandbox_folders_kills_the_command(backend, fill, tmp_path, monkeypatch):
    import services.sandbox.base as base
    import services.sandbox.disk_room as disk_room
    from services.sandbox import open_sandbox

    monkeypatch.setattr(disk_room, "MAX_ENTRIES", 1000)
    monkeypatch.setattr(base, "DISK_CHECK_S", 0.2)
    config = SandboxConfig(backend=backend, disk_mb=20)
    with open_sandbox(config, tmp_path) as box:
        code = FILL[fill] + "\nimport time\ntime.sleep(60)"
        result = box.run([box.python, "-c", code], box.base_env(), timeout=50)
    assert not result.ok and result.seconds < 40
    assert result.why() == ("killed for writing more than 20 MB to its folders" if fill == "bytes"
                            else "killed for making more than 1000 files in its folders")
