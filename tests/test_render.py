"""services/render.py: agent text for a terminal, a record, a spreadsheet and a page."""

import json

import pandas as pd
import pytest

from services import render
from services.fsutil import atomic_write_csv, atomic_write_json, read_csv_text

HOSTILE = "a\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m\u202eevil\u2066\udcff\n\r\t\x00\x7f\u2028 é 漢字"


def test_the_console_shows_every_control_visibly_and_keeps_plain_text():
    shown = render.console(HOSTILE)
    assert shown.isprintable() and not render.BIDI_PATTERN.search(shown)
    assert shown == ("a\\x1b]0;owned\\x07\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\u009b31m<U+202E>evil<U+2066>\\xff"
                     "\\n\\r\\t\\x00\\x7f<U+2028> é 漢字")
    assert render.console("plain text, with a \\ and 'quotes' and émoji ✓") == \
        "plain text, with a \\ and 'quotes' and émoji ✓"


def test_the_console_bounds_a_line_and_says_what_it_cut():
    shown = render.console("x" * 5000 + "\x1b", limit=100)
    assert shown == "x" * 100 + " ... (4901 more characters)"
    assert render.console("\x1b" * 50, limit=10) == "\\x1b\\x1b ... (48 more characters)"


def test_a_name_is_escaped_text_that_any_record_holds_and_two_names_stay_two():
    names = ["agent/\x1b]52;c;eA==\x07.py", "agent/\udcff\udcfe.py", "agent/\\xff.py", "agent/\u202eyp.txt"]
    stored = [render.name(n) for n in names]
    assert len(set(stored)) == len(names)
    for s in stored:
        assert s.isprintable() and s.encode("utf-8")
    assert stored[1] == "agent/\\xff\\xfe.py" and stored[2] == "agent/\\\\xff.py"


@pytest.mark.parametrize("value", ["=1+1", "+1", "-1", "@SUM(A1)", "\t=1", "\r=1", "\n=1", "＝1", "＋1", "－1", "＠x",
                                   "  =1", "'=1", "''-1", "'", "'x", "x=1", "", "plain", "1.5", "-"])
def test_csv_cells_are_neutralised_and_read_back_exactly(value):
    cell = render.csv_cell(value)
    assert render.csv_value(cell) == value
    rest = cell.lstrip("'").lstrip(" ")
    if rest and rest[0] in "=+-@\t\r\n＝＋－＠":
        assert cell.startswith("'"), cell


def test_a_csv_written_for_people_reads_back_as_written(tmp_path):
    frame = pd.DataFrame({"id": ["1", "2", "3", "4"], "prediction": ["=HYPERLINK(\"x\")", "-1", "'=2", "ok"],
                          "seconds": [1.5, -2.0, None, 3.0]})
    atomic_write_csv(tmp_path / "p.csv", frame, agent_text=True)
    raw = pd.read_csv(tmp_path / "p.csv", dtype=str, keep_default_na=False)
    assert not any(str(v).startswith(("=", "+", "-", "@")) for v in raw["prediction"])
    back = read_csv_text(tmp_path / "p.csv")
    assert list(back["prediction"]) == ["=HYPERLINK(\"x\")", "-1", "'=2", "ok"]
    assert list(back["seconds"]) == ["1.5", "-2.0", "", "3.0"]  # numbers are not agent text: as they were


def test_a_csv_for_people_maps_only_what_a_map_would_change(tmp_path):
    # The columns it leaves unmapped (for speed) must come out as mapping every cell writes them.
    frame = pd.DataFrame({"text": pd.Series(["a", None, "=x"], dtype="str"),
                          "plain": pd.Series(["a", None, "b"], dtype="str"), "mixed": [1, 2.5, None],
                          "f32": pd.Series([1.1, 2.2, 3.3], dtype="float32"), "f64": [1.5, None, 1e-5],
                          "ints": [1, 2, 3], "flags": [True, False, True], "none": [None] * 3,
                          "nullable": pd.array([1, None, 3], dtype="Int64"), "kind": pd.Categorical(["=a", "b", "a"])})
    atomic_write_csv(tmp_path / "p.csv", frame, agent_text=True)
    assert (tmp_path / "p.csv").read_bytes().decode() == \
        frame.map(render.csv_cell).to_csv(index=False, lineterminator="\r\n")


def test_a_record_with_a_lone_surrogate_is_written_and_reads_back_the_same(tmp_path):
    atomic_write_json(tmp_path / "r.json", {"dropped": ["agent/\udcff"], "\udcfe": 1})
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == {"dropped": ["agent/\udcff"], "\udcfe": 1}


def test_bidi_files_name_the_files_whose_added_lines_hold_bidi_controls():
    patch = ("diff --git a/agent/a.py b/agent/a.py\n--- a/agent/a.py\n+++ b/agent/a.py\n@@ -1 +1 @@\n"
             "-x = 1 \u202e\n+if access != 'user\u202e \u2066# admin\u2069 \u2066':\n"
             "diff --git a/agent/b.py b/agent/b.py\n--- a/agent/b.py\n+++ b/agent/b.py\n@@ -1 +1 @@\n+ok\n")
    assert render.bidi_files(patch) == ["agent/a.py"]
    assert render.bidi_visible("a\u202eb") == "a<U+202E>b"
