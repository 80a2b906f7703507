"""The dashboard's server over real HTTP, against synthetic runs full of hostile text: its own
routes only, nothing outside the runs folder, escaped agent text, a refused foreign Host,
never a write to a run, and a ledger read while the loop writes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest

from apps.dashboard.server import serve
from services.ledger import Call, Ledger
from support.cli import REPO_ROOT
from support.dashboard import Elements, assert_inert, get, pages_of, serving
from support.synthetic_run import ATTACKS, make_run


def snapshot(root: Path) -> dict:
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


def test_browsing_every_page_writes_nothing_to_the_runs(runs, server):
    root, _ = runs
    before = snapshot(root)
    for run in ("hostile", "plain"):
        for path in ["/", "/live", f"/runs/{run}/live", *pages_of(server, run)]:
            get(server, path)
    assert snapshot(root) == before  # no file made, changed or touched: no ledger -wal or -shm either


@pytest.mark.e2e
def test_the_ledger_is_read_while_the_loop_writes_it(tmp_path):
    from services.ledger import LedgerReader

    make_run(tmp_path / "live", nodes=6, seed=4)
    ledger = Ledger(tmp_path / "live" / "ledger.sqlite")  # the run's writer, WAL mode, as the gateway holds it
    problems, written, seen = [], [], []

    def write() -> None:
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                ledger.record(Call("live", "9999", "task", "openai/fake", 10, 1, 0.01))
                written.append(1)
                time.sleep(0.002)
        except Exception as e:  # a reader that locked the writer out
            problems.append(e)

    with serving(tmp_path / "live") as port:
        writer = threading.Thread(target=write)
        writer.start()
        reader = LedgerReader(tmp_path / "live" / "ledger.sqlite")
        while writer.is_alive():
            assert get(port, "/runs/live")[0] == 200
            seen.append(sum(r["calls"] for r in reader.spend("9999")))
        writer.join()
    seen.append(sum(r["calls"] for r in reader.spend("9999")))
    ledger.close()
    assert problems == [] and len(written) > 100
    assert seen == sorted(seen) and len(set(seen)) > 2 and seen[-1] == len(written)


@pytest.mark.e2e
def test_the_command_says_what_is_wrong_in_one_line(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "apps.dashboard", *args], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)

    r = run(str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "is not a folder" in r.stderr
    busy = serve(tmp_path, "127.0.0.1", 0)
    try:
        r = run(str(tmp_path), "--port", str(busy.server_address[1]))
        assert r.returncode == 2 and r.stderr.strip() == \
            f"error: port {busy.server_address[1]} is in use: pass --port N (0: any free port)"
    finally:
        busy.server_close()
    r = run(str(tmp_path), "--port", "70000")
    assert r.returncode == 2 and "--port must be 0 to 65535" in r.stderr
    # By default it listens on the loopback only, and Ctrl-C ends it quietly.
    proc = subprocess.Popen([sys.executable, "-m", "apps.dashboard", str(tmp_path), "--port", "0"], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("dashboard: http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0 and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_running_run_shows_its_generations_in_flight_and_their_rows(tmp_path):
    """The loop's pid in run_start is alive (this test's), so the run is live: the generation whose
    evaluation is under way shows the rows its journal has so far; when the run has ended, the
    same generations are cut short, not in flight."""
    live = make_run(tmp_path / "runs" / "live", nodes=20, seed=6, in_flight=2)
    make_run(tmp_path / "runs" / "dead", nodes=20, seed=6, in_flight=2, pid=2**22 + 1)  # no such process
    with serving(tmp_path / "runs") as port:
        status, _, page = get(port, "/runs/live")
        assert status == 200 and "running, 2 in flight" in page
        parser = Elements()
        parser.feed(page)
        flying = {a["data-node"] for t, a in parser.tags if t == "tr" and a.get("class") == "in-flight"}
        assert flying == set(live["in_flight"])
        # The evaluation under way: its rows done are its journal's lines, of the rows its split_start names.
        run_dir = tmp_path / "runs" / "live"
        start = [json.loads(line) for line in (run_dir / "archive.jsonl").read_text().splitlines()
                 if '"split_start"' in line and f'"node_id": "{live["evaluating"]}"' in line][-1]
        lines = (run_dir / "evals" / start["key"] / "predictions.jsonl").read_text().count("\n")
        done = [a for t, a in parser.tags if t == "progress"]
        assert [(int(a["value"]), int(a["max"])) for a in done] == [(lines, start["rows"])]
        assert 0 < lines < start["rows"]
        _, _, dead = get(port, "/runs/dead")
        assert "stopped" in dead and "cut short" in dead and 'class="in-flight"' not in dead


def test_a_run_goes_on_when_its_dashboard_cannot_start(tmp_path, capsys):
    from run_optimization import start_dashboard

    make_run(tmp_path / "run", nodes=3, seed=7)
    busy = serve(tmp_path, "127.0.0.1", 0)
    try:
        start_dashboard(tmp_path / "run", busy.server_address[1])
    finally:
        busy.server_close()
    assert "warning: the dashboard did not start (see above); the run goes on without it" in capsys.readouterr().out


def test_a_record_that_is_not_one_is_listed_as_a_problem_not_shown(tmp_path):
    make_run(tmp_path / "runs" / "odd", nodes=8, seed=8)
    forged = tmp_path / "runs" / "odd" / "nodes" / "3" / "node.json"
    forged.write_text('{"node_id": "3", "status": "<b>best</b>", "parent": "initial", "generation": 3}')
    with serving(tmp_path / "runs") as port:
        status, _, page = get(port, "/runs/odd")
        assert status == 200 and "nodes/3/node.json: not a node record" in page and "&lt;b&gt;best" in page
        assert 'data-node="3"' not in page  # not in the tree, not in the table
        assert get(port, "/runs/odd/nodes/3")[0] == 404


class Tables(HTMLParser):
    """The rows of a page's tables, each row's attributes and its cells' text, by the table's class."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[str, dict, list[str]]] = []  # (table class, row attributes, cells)
        self._table: list[dict] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._table.append(dict(attrs))
        elif tag == "tr" and self._table:
            self.rows.append((self._table[-1].get("class", ""), dict(attrs), []))
        elif tag in ("td", "th") and self.rows:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table" and self._table:
            self._table.pop()
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1][2].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def rows_of(body: str, table: str) -> list[tuple[dict, list[str]]]:
    parser = Tables()
    parser.feed(body)
    return [(attrs, cells) for kind, attrs, cells in parser.rows if kind == table and cells and attrs]


def make_group(folder: Path, seeds: list[int], nodes: int, **labels) -> None:
    """A folder of replicates as --replicates writes it: seed-N runs and group.json."""
    for seed in seeds:
        make_run(folder / f"seed-{seed}", nodes=nodes, seed=seed, **labels)
    (folder / "group.json").write_text(json.dumps({"schema_version": 1, "runs": [f"seed-{s}" for s in seeds],
                                                   "seeds": seeds, "argv": []}))


def test_runs_have_names_and_tags_a_filter_by_tag_and_a_comparison(tmp_path):
    from apps.dashboard.pieces import fmt_cost
    from apps.dashboard.reader import RunReader
    from search.stats import interval_text

    root = tmp_path / "runs"
    make_run(root / "a", nodes=14, seed=2, name="baseline " + ATTACKS["script"], tags=["sweep", ATTACKS["img"]])
    make_run(root / "b", nodes=10, seed=3, name="x" * 120, tags=["sweep", "t" * 40])
    make_run(root / "c", nodes=4, seed=5, name="y" * 5000)  # run.json by hand: refused, not shown
    make_group(root / "grp", [11, 12], nodes=9, tags=["replicates"])
    with serving(root) as port:
        status, _, index = get(port, "/")
        assert status == 200
        assert_inert(index)
        listed = {attrs["data-run"]: cells for attrs, cells in rows_of(index, "runs")}
        assert set(listed) == {"a", "b", "c", "grp/seed-11", "grp/seed-12"}  # a group's replicates are runs too
        # Names and tags are text, escaped; a run.json whose name is not one is a problem of that run.
        assert "baseline &lt;script&gt;window.__pwned=1&lt;/script&gt;" in index and "<script>window" not in index
        assert listed["b"][2:4] == ["x" * 120, "sweep" + "t" * 40] and listed["c"][2:4] == ["", ""]
        _, _, refused = get(port, "/runs/c")
        assert "run.json: not a run record (name" in refused and "y" * 200 not in refused
        _, _, run_page = get(port, "/runs/a")  # the run's own page says them too
        assert_inert(run_page)
        assert '<span class="value">baseline &lt;script&gt;window.__pwned=1&lt;/script&gt;</span>' in run_page
        assert '<span class="tag">&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;</span>' in run_page
        # Filtering by a tag, hostile ones included.
        for tag, expect in (("sweep", {"a", "b"}), (ATTACKS["img"], {"a"}), ("replicates", {"grp/seed-11",
                                                                                             "grp/seed-12"})):
            _, _, page = get(port, "/?" + urlencode({"tag": tag}))
            assert {attrs["data-run"] for attrs, _ in rows_of(page, "runs")} == expect, tag
            assert_inert(page)
        # The comparison: a line and a band per run, and one for the group of two replicates.
        status, _, page = get(port, "/compare?run=a&run=grp%2Fseed-11&run=grp%2Fseed-12")
        assert status == 200
        assert_inert(page)
        elements = Elements()
        elements.feed(page)
        lines = {a["data-series"]: a["points"].split() for t, a in elements.tags if t == "polyline"}
        bands = {a["data-series"] for t, a in elements.tags if t == "polygon" and a.get("class") == "band"}
        group = "group grp: mean of 2 replicates"
        assert set(lines) == bands == {"a (baseline " + ATTACKS["script"] + ")", "grp/seed-11", "grp/seed-12", group}
        readers = {name: RunReader(root / path, name).read() for name, path in
                   (("a", "a"), ("grp/seed-11", "grp/seed-11"), ("grp/seed-12", "grp/seed-12"))}
        for name, data in readers.items():
            label = "a (baseline " + ATTACKS["script"] + ")" if name == "a" else name
            assert len(lines[label]) == len(data.best_so_far()) == max(n.generation for n in data.nodes.values()) + 1
            best = data.best()
            low, high = data.interval(best)
            cells = {attrs["data-run"]: cells for attrs, cells in rows_of(page, "runs compared")}[name]
            assert cells[7] == f"{best.node_id}: {data.score(best):.3f} {interval_text(low, high)}"
            assert cells[8] == fmt_cost(data.cost())
        assert len(lines[group]) == 9  # generations 0..8, both replicates reached them
        assert get(port, "/compare?run=nope")[0] == 404
        assert "No run chosen" in get(port, "/compare")[2]


def test_a_node_page_shows_the_gold_label_beside_each_prediction(tmp_path):
    import pandas as pd

    summary = make_run(tmp_path / "runs" / "labels", nodes=8, seed=9)
    run_dir = tmp_path / "runs" / "labels"
    node = json.loads((run_dir / "nodes" / summary["best"] / "node.json").read_text())
    with serving(tmp_path / "runs") as port:
        _, _, page = get(port, f"/runs/labels/nodes/{summary['best']}")
    assert_inert(page)
    for split in ("train", "val"):
        truth = pd.read_csv(run_dir / "evals" / node["eval_keys"]["imo_grading"][split] / "predictions.csv", dtype=str)
        labels = dict(zip(truth["Grading ID"], truth["Reward"]))
        shown = [cells for attrs, cells in rows_of(page, "predictions") if attrs.get("class") in ("right", "wrong")]
        table = [c for c in shown if c[0] in labels]
        assert len(table) >= len(labels) and all(c[3] == labels[c[0]] for c in table), split
        assert {c[1] for c in table} == {"right", "wrong"}


def test_the_comparison_of_two_nodes_states_its_paired_test(tmp_path):
    from apps.dashboard.reader import RunReader
    from search.stats import paired_p

    summary = make_run(tmp_path / "runs" / "pair", nodes=14, seed=2)
    run_dir, best = tmp_path / "runs" / "pair", summary["best"]
    reader = RunReader(run_dir)
    nodes = reader.read().nodes

    def expected(split: str) -> tuple[int, str]:
        a, b = (reader.row_scores(nodes[n].eval_keys["imo_grading"][split], "overall_accuracy")
                for n in ("initial", best))
        shared = sorted(set(a) & set(b))
        return len(shared), f"{paired_p([b[i] for i in shared], [a[i] for i in shared], 'two-sided', 'exact'):.4g}"

    with serving(tmp_path / "runs") as port:
        _, _, page = get(port, f"/runs/pair/compare?a=initial&b={best}")
        tests = rows_of(page, "paired-tests")
        assert [c[1] for _, c in tests] == ["train", "val"] and "p, two-sided" in page
        for _, cells in tests:
            shared, p = expected(cells[1])
            assert int(cells[2]) == shared and cells[6] == p
            assert cells[5].startswith("exact sign test (McNemar) on the ")
        # Before the lists, a summary: the rows both answered, better + worse + same, and the same p.
        assert page.index('id="compare-summary"') < page.index('class="paired-tests"') < page.index("changed-summary")
        outcomes = rows_of(page, "outcomes")
        assert [c[1] for _, c in outcomes] == ["train", "val"]
        for _, cells in outcomes:
            common, better, worse, same, changed = map(int, cells[2:7])
            assert better + worse + same == common and cells[8] == expected(cells[1])[1]
            assert f"imo_grading {cells[1]}: {common} rows in common, {changed} changed: {better} better, " \
                   f"{worse} worse" in page
        # Partial credit: the sign-flip permutation test, the same p as paired_p's.
        key = nodes[best].eval_keys["imo_grading"]["val"]
        report_path = run_dir / "evals" / key / "report.json"
        report = json.loads(report_path.read_text())
        report["row_scores"] = {q: (0.5 if i % 3 == 0 else v) for i, (q, v) in enumerate(report["row_scores"].items())}
        report_path.write_text(json.dumps(report))
        _, _, page = get(port, f"/runs/pair/compare?a=initial&b={best}")
        cells = next(c for _, c in rows_of(page, "paired-tests") if c[1] == "val")
        shared, p = expected("val")
        assert cells[5].startswith("sign-flip permutation test") and cells[6] == p and int(cells[2]) == shared


def test_the_meta_agent_transcript_is_followed_while_it_works(tmp_path):
    summary = make_run(tmp_path / "runs" / "live", nodes=10, seed=6, in_flight=2)
    meta = next(n for n in summary["in_flight"] if n != summary["evaluating"])
    transcript = tmp_path / "runs" / "live" / "untrusted" / meta / "meta" / "meta_chat_history.md"
    with serving(tmp_path / "runs") as port:
        _, _, page = get(port, f"/runs/live/nodes/{meta}")
        assert 'id="transcript-live"' in page and "Earlier turns are left out" not in page
        before = get(port, "/runs/live/live")[2]
        with open(transcript, "a", encoding="utf-8") as f:  # the agent's next turn, hostile
            f.write(f"\n## assistant\n\n{ATTACKS['script']} {ATTACKS['anchor']}\n")
        assert get(port, "/runs/live/live")[2] != before  # the page reloads itself
        _, _, page = get(port, f"/runs/live/nodes/{meta}")
        assert_inert(page)
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt; &lt;a href=" in page and "<script>window" not in page
        with open(transcript, "a", encoding="utf-8") as f:  # a long session: only its end is shown
            f.write("".join(f"turn {i}: {'y' * 90}\n" for i in range(2000)) + "the latest turn\n")
        _, _, page = get(port, f"/runs/live/nodes/{meta}")
        shown = page.split('<pre class="text" id="transcript">')[1].split("</pre>")[0]
        assert "Earlier turns are left out" in page and shown.endswith("the latest turn\n")
        assert shown.startswith("turn ") and len(shown.encode()) <= 2**16
