"""The store of a run's evaluations: seeding a longer run from a shorter one survives a kill, and a
report is read back only in the shape the core writes."""

import json
import signal
import subprocess
import sys

import pytest

from archive.eval_store import REPORT, EvalStore
from domains.harness import JOURNAL
from services.errors import UserError
from support.cli import REPO_ROOT

SMALL, BIG = EvalStore.key("a" * 64, "imo_grading", "train", 10, "m"), EvalStore.key("a" * 64, "imo_grading",
                                                                                      "train", 100, "m")


def journal_of(tmp_path, rows: int = 2000) -> bytes:
    data = "".join(json.dumps({"id": str(i), "prediction": "correct" * 10, "error": None}) + "\n"
                   for i in range(rows)).encode()
    path = EvalStore(tmp_path).folder(SMALL) / JOURNAL
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return data


def test_a_folder_left_without_a_journal_is_seeded(tmp_path):
    data = journal_of(tmp_path)
    store = EvalStore(tmp_path)
    store.folder(BIG).mkdir(parents=True)  # a kill right after the folder was made
    assert store.seed(BIG, SMALL)
    assert (store.folder(BIG) / JOURNAL).read_bytes() == data


def test_a_kill_during_the_copy_leaves_no_cut_journal(tmp_path):
    data = journal_of(tmp_path)
    # The seeding process may write only part of the journal: the kernel kills it (SIGXFSZ, which
    # Python ignores unless told not to) mid-copy.
    script = ("import resource, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({len(data) // 3}, {len(data) // 3}))\n"
              "from pathlib import Path\n"
              "from archive.eval_store import EvalStore\n"
              f"EvalStore(Path(sys.argv[1])).seed({BIG!r}, {SMALL!r})\n")
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                       timeout=120)
    assert r.returncode == -signal.SIGXFSZ, r.stderr
    store = EvalStore(tmp_path)
    assert not (store.folder(BIG) / JOURNAL).exists()
    assert store.seed(BIG, SMALL)  # the next try seeds it whole
    assert (store.folder(BIG) / JOURNAL).read_bytes() == data


def test_without_a_journal_to_start_from_nothing_is_seeded(tmp_path):
    store = EvalStore(tmp_path)
    assert not store.seed(BIG, SMALL) and not store.folder(BIG).exists()


def write_report(tmp_path, text: bytes):
    path = EvalStore(tmp_path).report_path(BIG)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path


def test_reports_of_every_known_version_load(tmp_path):
    store = EvalStore(tmp_path)
    assert store.report(BIG) is None
    write_report(tmp_path, json.dumps({"overall_accuracy": 0.5}).encode())  # written before reports had a version
    assert store.report(BIG) == {"overall_accuracy": 0.5}
    store.save_report(BIG, {"schema_version": 1, "overall_accuracy": 0.25})
    assert store.report(BIG)["overall_accuracy"] == 0.25


@pytest.mark.parametrize("text", [b'{"overall_accuracy": 0.', b"[0.5]", b'"0.5"', b'{"schema_version": 99}',
                                  b'{"schema_version": "1"}', b'{"overall_accuracy": "\xff"}'])
def test_a_report_the_core_did_not_write_is_one_line_naming_the_file(tmp_path, text):
    path = write_report(tmp_path, text)
    with pytest.raises(UserError, match=f"{path}: not a report the run wrote") as err:
        EvalStore(tmp_path).report(BIG)
    assert "\n" not in str(err.value)


def test_a_linked_or_huge_report_is_refused_unread(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"overall_accuracy": 1.0}))
    path = EvalStore(tmp_path).report_path(BIG)
    path.parent.mkdir(parents=True)
    path.symlink_to(elsewhere)
    with pytest.raises(UserError, match=REPORT):
        EvalStore(tmp_path).report(BIG)
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(2**25)  # sparse: 32 MiB that cost no disk
    with pytest.raises(UserError, match="over"):
        EvalStore(tmp_path).report(BIG)
