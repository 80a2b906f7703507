"""IMO data tooling: bundled checksums, checked CSV loading, upstream setup, curation."""

import functools
import hashlib
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from domains.imo import curate_subsets, data, setup
from services.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
GRADING_COLUMNS = [
    "Grading ID", "Problem ID", "Problem", "Solution", "Grading guidelines",
    "Response", "Points", "Reward", "Problem Source",
]
REWARD_FOR_POINTS = {0: "Incorrect", 1: "Partial", 6: "Almost", 7: "Correct"}


def run_module(module, *args):
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )


def assert_one_line_error(proc):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:")
    assert "Traceback" not in proc.stderr


def synthetic_gradingbench(path, rows=1000, seed=0):
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 8, size=rows)
    df = pd.DataFrame({
        "Grading ID": [f"GB-{i:04d}" for i in range(rows)],
        "Problem ID": [f"PB-Basic-{i % 60:03d}" for i in range(rows)],
        "Problem": [f"Prove that $x_{i} \\geq 0$, for all \"n\"." for i in range(rows)],
        "Solution": [f"Line one\nline two, with a comma {i}" for i in range(rows)],
        "Grading guidelines": ["" if i % 7 == 0 else "(Partial) 1 point: NA" for i in range(rows)],
        "Response": [f"Response {i}: NA, null, ''" for i in range(rows)],
        "Points": [str(p) for p in points],
        "Reward": [REWARD_FOR_POINTS.get(int(p), "Partial") for p in points],
        "Problem Source": ["IMO Shortlist"] * rows,
    }, columns=GRADING_COLUMNS)
    df.to_csv(path, index=False)
    return df


# --- checksums --------------------------------------------------------------

def test_bundled_files_match_their_checksums():
    for folder in (data.DATA_DIR, REPO_ROOT / "domains" / "aime2025" / "data"):
        listed = data.read_checksums(folder)
        assert listed, folder
        assert data.verify_folder(folder) == len(listed)
        for name, digest in listed.items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest


def test_bundled_imo_folder_lists_every_csv():
    listed = set(data.read_checksums(data.DATA_DIR))
    assert listed == {p.name for p in data.DATA_DIR.glob("*.csv")}


def test_tampered_copy_is_rejected(tmp_path):
    folder = tmp_path / "data"
    shutil.copytree(data.DATA_DIR, folder)
    target = folder / "gradingbench_filtered_100_train.csv"
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    target.write_bytes(bytes(raw))

    with pytest.raises(UserError, match="checksum mismatch") as excinfo:
        data.load_csv(target, ["Reward"])
    assert str(target) in str(excinfo.value)
    assert "python -m domains.imo.setup" in str(excinfo.value)
    with pytest.raises(UserError, match="checksum mismatch"):
        data.verify_folder(folder)
    data.load_csv(folder / "gradingbench_filtered_100_val.csv", ["Reward"])


def test_unlisted_file_passes_and_hash_is_cached(tmp_path, monkeypatch):
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text("a,b\n1,2\n")
    assert data.verify_file(csv_path) is False

    hashed = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda f, name: hashed.append(1) or real(f, name))
    (tmp_path / "SHA256SUMS").write_text(
        data.format_checksums({"mine.csv": hashlib.sha256(csv_path.read_bytes()).hexdigest()})
    )
    assert data.verify_file(csv_path) is True
    assert data.verify_file(csv_path) is True
    data.load_csv(csv_path, ["a"])
    assert len(hashed) == 1


def test_malformed_checksum_line(tmp_path):
    (tmp_path / "SHA256SUMS").write_text("not-a-hash  x.csv\n")
    with pytest.raises(UserError, match="SHA256SUMS:1"):
        data.read_checksums(tmp_path)


# --- load_csv ---------------------------------------------------------------

def test_load_csv_keeps_strings_and_empty_cells(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("Points,Reward,Note\n07,Correct,\n1,NA,x\n")
    df = data.load_csv(path, ["Points", "Reward"])
    assert df["Points"].tolist() == ["07", "1"]
    assert df["Reward"].tolist() == ["Correct", "NA"]
    assert df["Note"].tolist() == ["", "x"]


def test_load_csv_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found") as excinfo:
        data.load_csv(tmp_path / "nope.csv", ["Reward"])
    assert "nope.csv" in str(excinfo.value)


@pytest.mark.parametrize("content", ["", "Points,Reward\n"])
def test_load_csv_empty(tmp_path, content):
    path = tmp_path / "empty.csv"
    path.write_text(content)
    with pytest.raises(UserError, match="has no rows"):
        data.load_csv(path, ["Reward"])


def test_load_csv_missing_columns(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("Points,Other\n1,x\n")
    with pytest.raises(UserError) as excinfo:
        data.load_csv(path, ["Points", "Reward", "Response"])
    message = str(excinfo.value)
    assert "'Reward'" in message and "'Response'" in message and str(path) in message
    assert "'Points', 'Reward'" not in message


# --- setup ------------------------------------------------------------------

def test_upstream_url_is_pinned():
    assert setup.file_url(setup.upstream_base_url(), "gradingbench.csv") == (
        "https://raw.githubusercontent.com/google-deepmind/superhuman/"
        "c1ee02e03d4cdb2ab21cd01ac927d895f5287fc8/imobench/gradingbench.csv"
    )
    assert "gradingbench.csv" in setup.UPSTREAM_FILES


def test_setup_falls_back_to_bundled_copy(tmp_path):
    dest = tmp_path / "upstream"
    proc = run_module("domains.imo.setup", "--dest", dest, "--timeout", 2, "--raw-host", "http://127.0.0.1:1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    assert "network unreachable" in lines[0]
    assert f"bundled copy at {data.DATA_DIR}" in lines[0]
    assert f"verified: {len(data.read_checksums(data.DATA_DIR))} files OK" in lines[0]
    assert not dest.exists()


def test_download_failing_part_way_writes_nothing(tmp_path):
    def fetch(url, timeout):
        if url.endswith("proofbench.csv"):
            raise setup.DownloadError(f"{url}: HTTP 404 Not Found")
        return b"a,b\n1,2\n"

    with pytest.raises(setup.DownloadError, match="404"):
        setup.download_upstream(tmp_path / "dest", base_url="http://mirror", fetch=fetch)
    assert not (tmp_path / "dest").exists()


@pytest.fixture
def fake_upstream(tmp_path):
    """A local HTTP server laid out like raw.githubusercontent.com at the pinned commit."""
    root = tmp_path / "srv"
    folder = root / setup.UPSTREAM_REPO / setup.UPSTREAM_COMMIT / setup.UPSTREAM_FOLDER
    folder.mkdir(parents=True)
    synthetic_gradingbench(folder / "gradingbench.csv")
    for name in setup.UPSTREAM_FILES:
        if name != "gradingbench.csv":
            (folder / name).write_text(f"Problem ID,Problem\nX-1,{name}\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_setup_downloads_from_upstream(tmp_path, fake_upstream):
    raw_host, served = fake_upstream
    dest = tmp_path / "dest"
    proc = run_module("domains.imo.setup", "--dest", dest, "--timeout", 5, "--raw-host", raw_host)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("source: upstream ")
    assert setup.upstream_base_url(raw_host) in proc.stdout
    for name in setup.UPSTREAM_FILES:
        assert (dest / name).read_bytes() == (served / name).read_bytes()
    assert data.verify_folder(dest) == len(setup.UPSTREAM_FILES)
    df = data.load_csv(dest / "gradingbench.csv", GRADING_COLUMNS)
    assert len(df) == 1000


def test_download_keeps_other_checksums_in_dest(tmp_path, fake_upstream):
    raw_host, _ = fake_upstream
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.csv").write_text("a\n1\n")
    (dest / "SHA256SUMS").write_text(
        data.format_checksums({"mine.csv": hashlib.sha256(b"a\n1\n").hexdigest()})
    )
    setup.download_upstream(dest, base_url=setup.upstream_base_url(raw_host), timeout=5)
    assert set(data.read_checksums(dest)) == {"mine.csv", *setup.UPSTREAM_FILES}
    assert data.verify_folder(dest) == 1 + len(setup.UPSTREAM_FILES)


# --- curate_subsets ---------------------------------------------------------

@pytest.fixture
def gradingbench(tmp_path):
    path = tmp_path / "in" / "gradingbench.csv"
    path.parent.mkdir()
    synthetic_gradingbench(path)
    return path


def recipe_train(path):
    """The upstream recipe, spelled out with plain pandas and sklearn."""
    from sklearn.model_selection import train_test_split

    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df = df[df["Points"].astype(int).isin([0, 1, 6, 7])]
    shuffled = df.sample(frac=1, random_state=42).reset_index(drop=True)
    subset = shuffled.sample(n=300, random_state=42).reset_index(drop=True)
    train, temp = train_test_split(subset, test_size=200, random_state=42, stratify=subset["Reward"])
    return train


@pytest.mark.e2e
def test_curate_splits_100_100_100(tmp_path, gradingbench):
    out = tmp_path / "out"
    proc = run_module("domains.imo.curate_subsets", gradingbench, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "train" in proc.stdout and "Correct" in proc.stdout

    paths = curate_subsets.output_paths(gradingbench, out)
    assert paths["train"] == out / "gradingbench_filtered_100_train.csv"
    assert paths["filtered"] == out / "gradingbench_filtered.csv"
    splits = {s: pd.read_csv(paths[s], dtype=str, keep_default_na=False) for s in curate_subsets.SPLITS}
    filtered = pd.read_csv(paths["filtered"], dtype=str, keep_default_na=False)

    assert list(filtered.columns) == GRADING_COLUMNS
    assert set(filtered["Points"]) == {"0", "1", "6", "7"}
    source = pd.read_csv(gradingbench, dtype=str, keep_default_na=False)
    assert len(filtered) == source["Points"].isin(["0", "1", "6", "7"]).sum()

    ids = [set(df["Grading ID"]) for df in splits.values()]
    for df in splits.values():
        assert len(df) == 100
        assert set(df["Points"]) <= {"0", "1", "6", "7"}
        assert (df["Reward"] == df["Points"].astype(int).map(REWARD_FOR_POINTS)).all()
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])

    counts = pd.DataFrame({s: df["Reward"].value_counts() for s, df in splits.items()}).fillna(0)
    assert (counts.max(axis=1) - counts.min(axis=1) <= 1).all(), counts

    pd.testing.assert_frame_equal(splits["train"], recipe_train(gradingbench).reset_index(drop=True))


def test_curate_is_deterministic(tmp_path, gradingbench):
    first = curate_subsets.curate(gradingbench, tmp_path / "a")
    second = curate_subsets.curate(gradingbench, tmp_path / "b")
    for name in first:
        assert first[name].read_bytes() == second[name].read_bytes()


def test_curate_defaults_to_input_folder(gradingbench):
    paths = curate_subsets.curate(gradingbench)
    assert paths["test"] == gradingbench.parent / "gradingbench_filtered_100_test.csv"
    assert paths["test"].is_file()


@pytest.mark.parametrize("case", ["missing_file", "missing_column", "empty", "too_few_rows", "tampered"])
def test_curate_cli_bad_input(tmp_path, case):
    path = tmp_path / "gradingbench.csv"
    if case == "missing_column":
        synthetic_gradingbench(path).drop(columns=["Reward"]).to_csv(path, index=False)
    elif case == "empty":
        path.write_text("")
    elif case == "too_few_rows":
        synthetic_gradingbench(path, rows=400)
    elif case == "tampered":
        synthetic_gradingbench(path)
        (tmp_path / "SHA256SUMS").write_text(data.format_checksums({path.name: "0" * 64}))
    out = tmp_path / "out"
    out.mkdir()

    proc = run_module("domains.imo.curate_subsets", path, "--out", out)
    assert_one_line_error(proc)
    expected = {
        "missing_file": "not found", "missing_column": "'Reward'", "empty": "has no rows",
        "too_few_rows": "at least 300", "tampered": "checksum mismatch",
    }[case]
    assert expected in proc.stderr
    assert list(out.iterdir()) == []
    assert proc.stdout == ""


def test_curate_without_sklearn(monkeypatch, gradingbench, tmp_path):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.model_selection", None)
    with pytest.raises(UserError, match=r"pip install -e '\.\[curate\]'"):
        curate_subsets.curate(gradingbench, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_only_a_grading_domain_builds_its_rows_from_another_runs_predictions(tmp_path):
    import pandas as pd

    from domains.registry import get_domain
    from services.errors import UserError

    grading = get_domain("imo_proof_grading")
    with pytest.raises(UserError, match="pass --proofs_dname"):
        grading.load()
    proofs = pd.DataFrame({"Problem ID": ["P1"], "Problem": ["p"], "Solution": ["s"], "Grading guidelines": ["g"]})
    rows = grading.rows_from(proofs, pd.Series(["my proof"]), tmp_path / "predictions.csv")
    assert rows["Response"].tolist() == ["my proof"] and "Response" not in proofs.columns
    with pytest.raises(UserError, match="lacks column.*Solution"):
        grading.rows_from(proofs.drop(columns=["Solution"]), pd.Series(["x"]), tmp_path / "predictions.csv")
    with pytest.raises(UserError, match="grades no other run"):
        get_domain("imo_grading").rows_from(proofs, pd.Series(["x"]), tmp_path / "predictions.csv")
