"""`python -m apps.export RUN --out DIR` given a run folder someone handed over: its repository, its node
records and the commits they name are planted, and DIR may hold links. Nothing may run, hang, or be written
outside DIR or through a link: one line, exit 2, and DIR as it was."""

import json
import os
import subprocess
import sys

import pytest
from test_handed_repo_attacks import KINDS, plant

from services.config import PROJECT_ROOT
from services.workspace import RunRepo
from support.synthetic_run import make_run


def export_cli(run, out, *extra):
    return subprocess.run([sys.executable, "-m", "apps.export", str(run), "--out", str(out), *extra],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


def one_line(r, says: str) -> None:
    assert r.returncode == 2, (r.stdout[-1500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-1500:]
    assert says in r.stderr, r.stderr


@pytest.fixture
def handed(tmp_path):
    run = tmp_path / "handed"
    made = make_run(run, nodes=6, seed=2)
    return run, made


@pytest.mark.attack("apps.export of a handed run whose repo/ would steer git (an ext:: promisor remote, "
                    "an include of a fifo, alternates, a diff driver, grafts, links and fifos for its objects, "
                    "refs, config or HEAD, a ref hard-linked to a user's file)")
@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_repository_runs_nothing_and_writes_nothing(handed, tmp_path, kind):
    run, _ = handed
    marker = tmp_path / "ran"
    plant(kind, run / "repo", marker)
    r = export_cli(run, tmp_path / "out")
    one_line(r, f"{run / 'repo'}: not a repository this project made")
    assert not marker.exists() and not (tmp_path / "out").exists()


def forged_commit(run, node_id: str, entries: list[tuple[str, str, bytes | None]]) -> str:
    """A commit of the run's repository holding `entries` (mode, path, content; None: a gitlink to the initial
    commit), named by node `node_id`'s record."""
    repo = RunRepo(run / "repo")
    stream = [b"commit refs/nodes/forged\ncommitter a <a@localhost> 0 +0000\ndata 6\nforged\n"]
    for mode, path, data in entries:
        if data is None:
            stream.append(f"M {mode} {repo.node_commit('initial')} {path}\n".encode())
        else:
            stream += [f"M {mode} inline {path}\ndata {len(data)}\n".encode(), data, b"\n"]
    repo.git("fast-import", "--quiet", "--done", "--force", input=b"".join(stream) + b"done\n")
    commit = repo.node_commit("forged")
    record = run / "nodes" / node_id / "node.json"
    node = json.loads(record.read_text())
    record.write_text(json.dumps({**node, "commit": commit}))
    return commit


PLANTED = {
    "git metadata": [("100644", "task_agent/.git/config", b"[core]\n\tfsmonitor = touch /tmp/pwned\n")],
    "a link": [("120000", "task_agent/prompts", b"/etc")],
    "a Python start-up hook": [("100644", "agent/evil.pth", b"import os\n")],
    "over the capture's quota of one file": [("100644", "agent/big.py", b"#" * (5 * 2**20 + 1))],
    "not a regular file (mode 160000)": [("160000", "agent/sub", None)],
}


@pytest.mark.attack("apps.export of a handed run whose node record names a planted commit: git metadata "
                    "(task_agent/.git/config with a core.fsmonitor command), a symlink to /etc, a .pth start-up "
                    "hook, a file over the capture's quota, a gitlink; or a commit missing from its repository")
@pytest.mark.parametrize("what", [*PLANTED, "missing"])
def test_a_planted_commit_is_refused_before_a_file_is_written(handed, tmp_path, what):
    run, made = handed
    out = tmp_path / "out"
    if what == "missing":
        record = run / "nodes" / made["best"] / "node.json"
        record.write_text(json.dumps({**json.loads(record.read_text()), "commit": "ab" * 20}))
        says = f"{run / 'repo'}: cannot give commit abababababab"
    else:
        forged_commit(run, made["best"], PLANTED[what])
        says = f"is not one the loop writes ({PLANTED[what][0][1]}: {what}"
    r = export_cli(run, out)
    one_line(r, says)
    assert not out.exists() and not (tmp_path / "pwned").exists()


@pytest.mark.attack("apps.export --out a link to a user's folder, and --force over a DIR whose code/, README.md "
                    "and export.json are links to a user's folder and files")
def test_no_write_passes_through_a_link_in_out(handed, tmp_path):
    run, made = handed
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    (victim / "file.txt").write_text("the user's")
    os.symlink(victim, tmp_path / "linked")
    r = export_cli(run, tmp_path / "linked")
    one_line(r, f"--out {tmp_path / 'linked'} is a link")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "code")
    os.symlink(victim / "file.txt", out / "README.md")
    os.symlink(victim / "file.txt", out / "export.json")
    r = export_cli(run, out)
    one_line(r, "is not empty: pass --force")
    r = export_cli(run, out, "--force")
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(os.listdir(victim)) == ["file.txt", "keep"] and (victim / "file.txt").read_text() == "the user's"
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert json.loads((out / "export.json").read_text())["node"] == made["best"]
