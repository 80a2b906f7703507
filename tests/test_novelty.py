"""Novelty screening's comparison of changes (archive/novelty.py), on real diffs made by git."""

import subprocess

from archive.novelty import changed_lines, nearest, node_change, similarity


def git_diff(tmp_path, before: str, after: str) -> str:
    """The diff git makes of a file changed from `before` to `after`."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
    run("init", "-q")
    (repo / "agent.py").write_text(before)
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    (repo / "agent.py").write_text(after)
    return run("diff").stdout


BASE = "".join(f"line {i}\n" for i in range(40))
EDIT = "    prompt = 'grade carefully: check every step'\n    retries = 3\n"


def test_the_same_edit_at_another_place_or_indent_is_the_same_change(tmp_path):
    here = changed_lines(git_diff(tmp_path / "a", BASE, EDIT + BASE))
    middle = BASE.index("line 20\n")
    there = changed_lines(git_diff(tmp_path / "b", BASE, BASE[:middle] + EDIT.replace("    ", "\t") + BASE[middle:]))
    assert here == there == ["+prompt = 'grade carefully: check every step'", "+retries = 3"]
    assert similarity(here, there) == 1.0


def test_a_different_edit_is_not_near_and_nearest_names_the_first_match(tmp_path):
    mine = changed_lines(git_diff(tmp_path / "a", BASE, EDIT + BASE))
    other = changed_lines(git_diff(tmp_path / "b", BASE, BASE.replace("line 7\n", "line seven\n")))
    close = mine[:1] + ["+retries = 4"]
    assert similarity(mine, other) == 0.0
    assert nearest(mine, [("2", other), ("3", close), ("4", mine)], 0.95) == ("4", 1.0)
    assert nearest(mine, [("2", other), ("3", close)], 0.4) == ("3", 0.5)
    assert nearest([], [("4", mine)], 0.5) is None  # no change is never a duplicate


def test_a_nodes_patch_is_read_bounded_and_a_link_is_no_patch(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "patch.diff").write_text("+a\n" * 10 + "--- x\n+++ y\n@@ -1 +1 @@\n-b\n")
    assert node_change(tmp_path, "1") == ["+a"] * 10 + ["-b"]
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "patch.diff").symlink_to(tmp_path / "1" / "patch.diff")
    assert node_change(tmp_path, "2") == [] and node_change(tmp_path, "initial") == []
