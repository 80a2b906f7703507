"""Hostile files a user's command line names: configs, a resumed run's run.json, a group's
group.json, a --data file. Each must end the command in one line (no traceback), with exit 2, in
bounded time and memory, and leave nothing behind (no run folder, no marker)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from support.cli import REPO_ROOT

pytestmark = pytest.mark.e2e  # every test here runs a whole process (the loop, a sandbox, a browser)

MAX_SECONDS = 30  # each command below takes about a second; the alias bomb took minutes before
MAX_RSS_MB = 400  # an interpreter with pandas is ~150 MB; the alias bomb took 5.9 GB before

MEASURE = textwrap.dedent(f"""
    import resource, subprocess, sys, time
    started = time.monotonic()
    try:
        r = subprocess.run(sys.argv[2:], cwd=sys.argv[1], capture_output=True, text=True, timeout={MAX_SECONDS})
        code, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        code, out, err = "timeout", "", ""
    print(repr((code, out, err, time.monotonic() - started,
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)))
""")


def run_measured(*args, cwd=REPO_ROOT) -> tuple:
    """`python -m ARGS` in a fresh parent process, so that its children's peak memory is this
    command's alone: (exit code, stdout, stderr, seconds, peak RSS in MB)."""
    r = subprocess.run([sys.executable, "-c", MEASURE, str(cwd), sys.executable, "-m", *args],
                       capture_output=True, text=True, timeout=MAX_SECONDS + 60)
    return eval(r.stdout)  # noqa: S307 (our own repr)


def assert_one_line_refusal(result, *expected: str) -> None:
    code, out, err, seconds, rss = result
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err + out and len(err.strip().splitlines()) == 1, err[-2000:]
    for text in expected:
        assert text in err, err
    assert seconds < MAX_SECONDS and rss < MAX_RSS_MB, (seconds, rss)


def alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes whose aliases make 9**levels strings in anything that walks the value."""
    items = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    items += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "models:\n  task: [" + ", ".join(items) + "]\n"


def plan(tmp_path, config, *extra) -> tuple:
    return run_measured("run_optimization", "--domain", "imo_grading", "--config", str(config), "--dry_run",
                        "--output_dir", str(tmp_path / "out"), *extra)


@pytest.mark.attack("config: a YAML alias bomb (9^9 strings from 400 bytes) in --config")
def test_an_alias_bomb_config_is_refused(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text(alias_bomb())
    assert_one_line_refusal(plan(tmp_path, config), "anchors and aliases", str(config))
    assert not (tmp_path / "out").exists()


@pytest.mark.attack("config: --config bytes that are not UTF-8")
def test_a_config_that_is_not_utf8_is_refused(tmp_path):
    config = tmp_path / "latin1.yaml"
    config.write_bytes("loop:\n  seed: 1  # r\xe9sum\xe9\n".encode("latin-1"))
    assert_one_line_refusal(plan(tmp_path, config), "not UTF-8", "0xe9")


@pytest.mark.attack("config: a 100 MB --config, a fifo and /dev/zero as --config")
def test_a_huge_or_endless_config_is_refused_unread(tmp_path):
    config = tmp_path / "huge.yaml"
    with open(config, "wb") as f:
        f.write(b"loop:\n  seed: 1\n# ")
        f.write(b"x" * (100 * 2**20))
    assert_one_line_refusal(plan(tmp_path, config), "over the limit")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert_one_line_refusal(plan(tmp_path, fifo), "not a regular file (a fifo)")
    assert_one_line_refusal(plan(tmp_path, "/dev/zero"), "not a regular file (a character device)")


@pytest.mark.attack("config: a YAML tag for a Python object (os.system) and YAML nested 5,000 levels deep")
def test_python_tags_and_deep_nesting_are_refused(tmp_path):
    marker = tmp_path / "MARKER"
    config = tmp_path / "tag.yaml"
    config.write_text(f'loop: !!python/object/apply:os.system ["touch {marker}"]\n')
    assert_one_line_refusal(plan(tmp_path, config), "could not determine a constructor")
    assert not marker.exists()
    deep = tmp_path / "deep.yaml"
    deep.write_text("loop: " + "[" * 5000 + "]" * 5000 + "\n")
    assert_one_line_refusal(plan(tmp_path, deep), "nested more than")


@pytest.mark.attack("a resumed run's run.json replaced by JSON nested 100,000 deep, a 100 MB file, a fifo, "
                    "or bytes that are not UTF-8")
def test_a_hostile_run_json_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    saved = run / "run.json"
    for content, expected in ((b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
                              (b"{" + b" " * (100 * 2**20) + b"}", "over"),
                              (b'{"domains": ["\xff"]}', "not UTF-8"),
                              (None, "not a regular file")):
        saved.unlink(missing_ok=True)
        if content is None:
            os.mkfifo(saved)
        else:
            saved.write_bytes(content)
        assert_one_line_refusal(run_measured("run_optimization", "--resume_from", str(run)), expected)
    assert sorted(p.name for p in run.iterdir()) == ["run.json"]  # nothing made: no lock, no ledger


@pytest.mark.attack("a group.json that is not UTF-8, or nested too deeply, read by apps.analyze and a resume")
def test_a_hostile_group_json_is_refused(tmp_path):
    group = tmp_path / "group"
    group.mkdir()
    for content in (b'{"schema_version": 1, "runs": ["seed-\xff"]}', b"[" * 100_000):
        (group / "group.json").write_bytes(content)
        for args in (("apps.analyze", str(group), "--out", str(tmp_path / "analysis")),
                     ("run_optimization", "--resume_from", str(group))):
            assert_one_line_refusal(run_measured(*args), "group.json")
    assert not (tmp_path / "analysis").exists()
    assert sorted(p.name for p in group.iterdir()) == ["group.json"]


@pytest.mark.attack("--data: a fifo and /dev/zero as a data set file")
def test_a_data_file_that_never_ends_is_refused(tmp_path):
    fifo = tmp_path / "amo.jsonl"
    os.mkfifo(fifo)
    for path, expected in ((fifo, "(a fifo)"), ("/dev/zero", "(a character device)")):
        result = run_measured("run_optimization", "--domain", "amo_bench", "--data", f"amo_bench={path}",
                              "--dry_run", "--output_dir", str(tmp_path / "out"))
        assert_one_line_refusal(result, "--data", expected)


def test_a_linked_config_is_still_read(tmp_path):
    """A user's config may be a link (dotfiles): links are followed for --config, unlike records."""
    real = tmp_path / "real.yaml"
    real.write_text(json.dumps({"loop": {"seed": 5}}))
    (tmp_path / "link.yaml").symlink_to(real)
    code, out, err, _, _ = plan(tmp_path, tmp_path / "link.yaml")
    assert code == 0 and "seed 5" in out, err[-2000:]
