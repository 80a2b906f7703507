"""A run folder's git repository (`RUN/repo`) handed over by someone: git obeys what a repository's own
files say, so each trick below is planted in a real repository the project made, then opened the way
every reader opens it (services/workspace.py RunRepo, checked by services/git_safety.py) and through
a real command line. Nothing may run, hang or read outside the repository: one line, exit 2."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import services.workspace as workspace_module
from services.config import PROJECT_ROOT
from services.errors import UserError
from services.workspace import RunRepo


def made_repo(root: Path) -> RunRepo:
    return RunRepo.create(root / "repo", PROJECT_ROOT)


def git_config(repo: Path, *pairs: tuple[str, str]) -> None:
    for key, value in pairs:
        subprocess.run(["git", "config", "--file", str(repo / "config"), key, value], check=True)


def lazy_fetch_command(repo: Path, marker: Path) -> None:
    """A partial clone whose promisor remote is a shell command, its objects gone: any read 'fetches'."""
    for entry in (repo / "objects").iterdir():
        if entry.name not in ("info", "pack"):
            subprocess.run(["rm", "-rf", str(entry)], check=True)
    for pack in (repo / "objects" / "pack").iterdir():
        pack.unlink()
    git_config(repo, ("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
               ("remote.origin.url", f"ext::sh -c touch% {marker}"), ("remote.origin.promisor", "true"),
               ("protocol.ext.allow", "always"))


def plant(kind: str, repo: Path, marker: Path) -> None:
    if kind == "lazy fetch":
        lazy_fetch_command(repo, marker)
    elif kind == "include of a fifo":
        os.mkfifo(repo / "extra.cfg")
        git_config(repo, ("include.path", "extra.cfg"))
    elif kind == "alternates":
        (repo / "objects" / "info").mkdir(exist_ok=True)
        (repo / "objects" / "info" / "alternates").write_text(f"{PROJECT_ROOT / '.git' / 'objects'}\n")
    elif kind == "attributes and a diff driver":
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "attributes").write_text("* diff=evil\n")
        git_config(repo, ("diff.evil.xfuncname", "^(.*)$"), ("diff.evil.command", f"touch {marker}"))
    elif kind == "grafts":
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "grafts").write_text("0" * 40 + "\n")
    elif kind == "objects as a link":
        os.rename(repo / "objects", repo.parent / "elsewhere")
        os.symlink(repo.parent / "elsewhere", repo / "objects")
    elif kind == "config as a fifo":
        (repo / "config").unlink()
        os.mkfifo(repo / "config")
    elif kind == "a reflog linked to a user's file":
        (repo / "logs" / "refs" / "nodes").mkdir(parents=True)
        os.symlink(marker, repo / "logs" / "refs" / "nodes" / "100")
    elif kind == "refs/nodes as a link":
        os.rename(repo / "refs" / "nodes", repo.parent / "nodes-elsewhere")
        os.symlink(repo.parent / "nodes-elsewhere", repo / "refs" / "nodes")
    elif kind == "an object folder as a link":
        # A two-digit folder the repository does not have yet (its objects' names depend on the commits' times).
        free = next(name for name in (f"{i:02x}" for i in range(255, -1, -1)) if not (repo / "objects" / name).exists())
        os.symlink(repo.parent, repo / "objects" / free)
    elif kind == "HEAD as a fifo":
        (repo / "HEAD").unlink()
        os.mkfifo(repo / "HEAD")
    elif kind == "a ref of two names":
        ref = next((repo / "refs" / "nodes").iterdir())
        os.link(ref, repo.parent / "users-file")


KINDS = ("lazy fetch", "include of a fifo", "alternates", "attributes and a diff driver", "grafts",
         "objects as a link", "config as a fifo", "a reflog linked to a user's file", "refs/nodes as a link",
         "an object folder as a link", "HEAD as a fifo", "a ref of two names")


@pytest.mark.attack("a handed run's repo/ steering git: a partial clone whose promisor remote is an ext:: shell "
                    "command (objects removed), an include of a fifo, alternates into the host's git store, "
                    "info/attributes with a diff driver, grafts, objects as a link, a config that is a fifo, a "
                    "reflog or an object folder linked to the user's files, refs as a link, HEAD as a fifo, a ref "
                    "hard-linked to a user's file (git writes through each)")
@pytest.mark.parametrize("kind", KINDS)
def test_a_repository_that_would_steer_git_is_refused(tmp_path, kind):
    repo = made_repo(tmp_path)
    marker = tmp_path / "ran"
    plant(kind, repo.path, marker)
    started = time.monotonic()
    with pytest.raises(UserError, match="not a repository this project made") as refused:
        RunRepo(repo.path)
    assert time.monotonic() - started < 5 and "\n" not in str(refused.value)
    assert not marker.exists()


@pytest.mark.attack("a handed run's repo/ whose promisor remote is an ext:: shell command, with the repository "
                    "check bypassed: git's own environment still allows no protocol and no lazy fetch")
def test_git_runs_no_remote_even_unchecked(tmp_path, monkeypatch):
    repo = made_repo(tmp_path)
    commit = repo.node_commit("initial")
    marker = tmp_path / "ran"
    lazy_fetch_command(repo.path, marker)
    monkeypatch.setattr(workspace_module, "check_repository", lambda git_dir: None)
    unchecked = RunRepo(repo.path)
    for args in (("ls-tree", "-r", commit), ("cat-file", "-p", commit), ("rev-parse", f"{commit}^{{tree}}")):
        with pytest.raises(subprocess.CalledProcessError):
            unchecked.git(*args)
    assert not marker.exists()


@pytest.mark.e2e
@pytest.mark.attack("a handed run whose repo/ runs a shell command when read, given to setup_proofgrader_repo "
                    "--generate_dir and shown on the dashboard's compare page")
def test_readers_of_a_handed_run_refuse_its_repository_in_one_line(tmp_path):
    from support.dashboard import get, serving
    from support.synthetic_run import make_run

    run = tmp_path / "runs" / "handed"
    best = make_run(run, nodes=6, seed=2)["best"]
    marker = tmp_path / "ran"
    lazy_fetch_command(run / "repo", marker)
    r = subprocess.run([sys.executable, "setup_proofgrader_repo.py", "--generate_dir", str(run), "--dst",
                        str(tmp_path / "pg")], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 2, (r.stdout[-1500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-1500:]
    assert f"{run / 'repo'}: not a repository this project made" in r.stderr, r.stderr
    assert not marker.exists() and not (tmp_path / "pg").exists()
    with serving(tmp_path / "runs") as port:
        status, _, page = get(port, f"/runs/handed/compare?a=initial&b={best}")
    assert status == 200 and "not a repository this project made" in page
    assert not marker.exists()


@pytest.mark.e2e
@pytest.mark.attack("a handed group of replicates whose group.json command line resumes, evaluates or serves another "
                    "run of the user's (--resume_from, --evaluate, --split, --dashboard, --output_dir), starts "
                    "from another run's code or a host folder (--initial_from, --initial_agent PATH, --set "
                    "loop.initial_agent=PATH), or reads a host file as config (--config, --preset)")
def test_a_group_command_line_cannot_reach_other_runs(tmp_path):
    from services.fsutil import atomic_write_json

    users_own = tmp_path / "users_own_run"
    users_own.mkdir()
    group = tmp_path / "group"
    group.mkdir()
    for extra, expected in (
            (["--resume_from", str(users_own), "--evaluate", "1", "--split", "test"], "has --resume_from"),
            (["--dashboard", "8765"], "has --dashboard"),
            (["--output_dir", str(tmp_path / "elsewhere")], "has --output_dir"),
            (["--initial_from", f"{users_own}:initial"], f"asks for --initial_from {users_own}:initial"),
            (["--initial_agent", str(users_own)], f"asks for --initial_agent {users_own}"),
            (["--set", f"loop.initial_agent={users_own}"], f"asks for --initial_agent {users_own}"),
            (["--config", "/etc/passwd"], "asks for --config /etc/passwd"),
            (["--preset", "paper"], "asks for --preset paper")):
        atomic_write_json(group / "group.json", {"schema_version": 1, "runs": ["seed-0"], "seeds": [0],
                                                "argv": ["--domain", "imo_grading", *extra]})
        r = subprocess.run([sys.executable, "-m", "run_optimization", "--resume_from", str(group)], cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        assert r.returncode == 2 and expected in r.stderr, (extra, r.stderr[-1500:])
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-1500:]
        assert sorted(os.listdir(users_own)) == [] and not (group / "seed-0").exists()
        assert not (tmp_path / "elsewhere").exists()


@pytest.mark.e2e
@pytest.mark.attack("a handed run whose repo/ has a plain config but lost its objects: setup_proofgrader_repo "
                    "--generate_dir reads the chosen node's code")
def test_a_repository_without_its_objects_is_one_line(tmp_path):
    from support.synthetic_run import make_run

    run = tmp_path / "runs" / "handed"
    make_run(run, nodes=6, seed=2)
    for entry in (run / "repo" / "objects").iterdir():
        if entry.name not in ("info", "pack"):
            subprocess.run(["rm", "-rf", str(entry)], check=True)
    for pack in (run / "repo" / "objects" / "pack").iterdir():
        pack.unlink()
    r = subprocess.run([sys.executable, "setup_proofgrader_repo.py", "--generate_dir", str(run), "--dst",
                        str(tmp_path / "pg")], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert r.returncode == 2, (r.stdout[-1500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-1500:]
    assert f"{run / 'repo'}: cannot give commit" in r.stderr and not (tmp_path / "pg").exists()


@pytest.mark.e2e
@pytest.mark.attack("a handed run whose workspaces/ is a link to a folder of the user, evaluated with --evaluate "
                    "(an evaluation's workspace is emptied and rewritten before its sandbox opens)")
def test_evaluate_never_empties_a_folder_through_a_planted_link(tmp_path, fake_openai):
    from support.cli import cli_env, run_cli, run_loop
    from support.scripted_loop import loop_config, responder

    fake_openai.set_responder(responder({}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "0", config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "out" / "run"
    victim = tmp_path / "victim"
    for name in ("initial-eval", "initial-test-eval"):
        (victim / name / "sub").mkdir(parents=True)
        (victim / name / "keep.txt").write_text("the user's")
    subprocess.run(["rm", "-rf", str(run / "workspaces")], check=True)
    os.symlink(victim, run / "workspaces")
    r = run_cli("run_optimization", "--resume_from", str(run), "--evaluate", "initial", "--split", "test",
                env=cli_env(fake_openai))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "evaluated: node initial imo_grading/test=" in r.stdout
    for name in ("initial-eval", "initial-test-eval"):
        assert (victim / name / "keep.txt").read_text() == "the user's" and (victim / name / "sub").is_dir()
    assert sorted(os.listdir(victim)) == ["initial-eval", "initial-test-eval"]
