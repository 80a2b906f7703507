"""The dashboard's list of evaluation folders (python -m domains.harness output, apps/dashboard/evaluations.py)
given hostile ones: their run.json and predictions.jsonl are a stranger's files like every file of a handed
folder. None is followed through a link, opened as a fifo or read past its bound; no value runs as script or
shows a control character raw; a wrong type is left out, not shown as what it claims."""

import json
import os
import time

import pytest

from support.dashboard import assert_inert, get, serving

SECRET = "SECRET-OF-THE-USER-7Q"


def evaluation(root, name: str, run_json: object | None = None, journal: str = '{"id": "a"}\n'):
    folder = root / name
    folder.mkdir()
    (folder / "predictions.jsonl").write_text(journal)
    if run_json is not None:
        (folder / "run.json").write_text(run_json if isinstance(run_json, str) else json.dumps(run_json))
    return folder


@pytest.mark.attack("dashboard: evaluation folders of domains.harness whose run.json is a link to a host file, a "
                    "fifo or 5 MB, holds <script>, bidi and control characters, 20 KB values and values of the "
                    "wrong type; whose predictions.jsonl is a fifo; and a link to an evaluation folder elsewhere")
def test_hostile_evaluation_folders_are_listed_as_data(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text(json.dumps({"domain": SECRET, "model": SECRET}))
    os.symlink(secret, evaluation(root, "linked-record") / "run.json")
    os.mkfifo(evaluation(root, "fifo-record") / "run.json")
    evaluation(root, "huge-record", json.dumps({"domain": "x" * (5 * 2**20)}))
    evaluation(root, "hostile-record", {
        "domain": "<script>window.__pwned=1</script>", "model": "gpt\u202e4o\x1b]52;c;cGF5\x07",
        "agent_path": "A" * 20_000, "subset": "<img src=x onerror=alert(1)>", "rows": "<b>10</b>",
        "done": {"nested": 1}, "errors": -3, "cost_usd": "NaN", "finished_at": ["<i>"], "stopped_by": True})
    at_work = evaluation(root, "fifo-journal")
    (at_work / "predictions.jsonl").unlink()
    os.mkfifo(at_work / "predictions.jsonl")
    (at_work / "predictions.csv").write_text("id,prediction\n")
    elsewhere = evaluation(tmp_path, "elsewhere", {"domain": SECRET})
    os.symlink(elsewhere, root / "linked-folder")
    with serving(root) as port:
        started = time.monotonic()
        status, _, page = get(port, "/")
        assert time.monotonic() - started < 5  # a fifo would have blocked the read
    assert status == 200
    assert_inert(page)
    listed = {n for n in ("linked-record", "fifo-record", "huge-record", "hostile-record", "fifo-journal",
                          "linked-folder") if f'data-evaluation="{n}"' in page}
    assert listed == {"linked-record", "fifo-record", "huge-record", "hostile-record", "fifo-journal"}
    assert SECRET not in page and "xxxxxxxxxx" * 30 not in page and "A" * 201 not in page
    assert "<script>window.__pwned" not in page and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "<img" not in page and "\u202e" not in page and "\x1b" not in page and "&lt;U+202E&gt;" in page
    assert page.count("run.json not shown") == 3  # the link, the fifo and the 5 MB record
    assert "<b>10</b>" not in page and "nested" not in page and "NaN" not in page and "-3" not in page
    assert "(0 rows in its predictions.jsonl so far)" in page  # the fifo journal: not opened, no rows
    assert 'class="run"' not in page  # none of them is shown as a run of the loop
