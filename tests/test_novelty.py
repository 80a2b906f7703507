"""Novelty screening's comparison of changes (archive/novelty.py), on real diffs made by git."""

import itertools
import random
import subprocess
from difflib import SequenceMatcher

import pytest

from archive.novelty import MAX_LINES, Change, changed_lines, nearest, node_change, similarity
from archive.text_pass import TooLarge


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


def test_the_same_lines_in_another_order_are_the_same_change_and_a_repeated_line_counts_each_time():
    lines = [f"+prompt part {i}" for i in range(50)]
    assert similarity(lines, lines[::-1]) == 1.0  # order-insensitive, as the module says
    assert similarity(["+a", "+a"], ["+a"]) == pytest.approx(2 / 3)
    assert similarity(Change.of(lines), lines[:25]) == pytest.approx(50 / 75)


def test_similarity_is_difflibs_quick_ratio_an_upper_bound_of_the_ratio_compared_before():
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice(["+a", "+b", "+c", "-d", "+e"]) for _ in range(rng.randrange(1, 25))]
        b = [rng.choice(["+a", "+b", "+c", "-d", "+e"]) for _ in range(rng.randrange(1, 25))]
        matcher = SequenceMatcher(None, a, b, autojunk=False)
        assert similarity(a, b) == pytest.approx(matcher.quick_ratio())
        assert similarity(a, b) >= matcher.ratio() - 1e-12  # a threshold catches at least what it caught


def test_a_comparison_past_its_deadline_stops_and_what_is_compared_is_capped():
    endless = (("n", ["+other"]) for _ in itertools.count())
    with pytest.raises(TooLarge, match="novelty: compared with [0-9]+ earlier nodes before its deadline"):
        nearest(["+mine"], endless, 0.9, seconds=0.05)
    patch = "".join(f"+line {i}\n" for i in range(3 * MAX_LINES))
    assert len(changed_lines(patch)) == MAX_LINES and len(Change.of(changed_lines(patch) * 2)) == MAX_LINES
