"""The synthetic run folder (tests/support/synthetic_run.py) reads as a real one, through the project's own
readers: the archive, the evaluation store, the scorer, the harness's journal, the predictions loader, the
dashboard's transcript reader, the run's git repository and the ledger; and what it wrote is what the
production writers make of what those readers read back."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from agent.base_agent import AgentSystem
from agent.tool_loop import log_message
from apps.dashboard import transcript
from apps.dashboard.reader import RunReader
from archive.eval_store import EvalStore
from archive.records import Status
from archive.store import META_TRANSCRIPT, Archive
from domains.harness import JOURNAL, PREDICTIONS, Journal, write_predictions
from domains.harness.split import fingerprint
from domains.registry import get_domain
from optimizer.meta_outcome import META_LOG
from services.fsutil import read_csv_text
from services.ledger import Ledger
from services.workspace import RunRepo
from support.synthetic_run import ATTACKS, BIG_TRANSCRIPT, DOMAIN, META_MODEL, TASK_MODEL, make_run, shown_rows

NODES, IN_FLIGHT = 120, 3


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("synthetic") / "run"
    return run_dir, make_run(run_dir, NODES, seed=3, hostile=True, in_flight=IN_FLIGHT, feedback=True)


@pytest.fixture(scope="module")
def archive(run) -> Archive:
    return Archive(run[0])


def test_the_archive_loads_every_node_with_its_status(run, archive):
    run_dir, summary = run
    assert len(archive.nodes) == NODES and summary["nodes"] == [n.node_id for n in archive.ordered()]
    assert {n.node_id: str(n.status) for n in archive.nodes.values()} == summary["statuses"]
    counts = Counter(n.status for n in archive.nodes.values())
    assert set(counts) == {Status.OK, Status.NO_CHANGE, Status.META_FAILED, Status.LOAD_FAILED, Status.EVAL_FAILED,
                           Status.BUDGET_STOPPED}
    assert counts[Status.OK] > NODES / 2 and counts[Status.BUDGET_STOPPED] == 2
    for node in archive.nodes.values():
        assert node.status == Status.OK or node.status == Status.NO_CHANGE or node.error
        if node.parent is not None:
            assert archive.nodes[node.parent].valid_parent and set(node.seconds) >= {"meta", "total"}
    domain = get_domain(DOMAIN)
    assert summary["best"] == archive.best([domain], {DOMAIN: 100}).node_id


def test_every_generation_is_logged_in_order(run, archive):
    events = archive.events()
    assert events[0]["event"] == "run_start" and events[0]["pid"] == os.getpid()
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    kinds = defaultdict(list)
    for e in events:
        if "node_id" in e:
            kinds[e["node_id"]].append(e["event"])
    for node in archive.nodes.values():
        expected = ["gen_start"] + (["meta_done"] if node.parent else []) + ["node_recorded"]
        assert [k for k in kinds[node.node_id] if k != "split_start"] == expected
        assert archive.meta_result(node.node_id) is None or archive.meta_result(node.node_id).commit == node.commit
    flights = [s.node_id for s in archive.pending_generations()]
    assert flights == run[1]["in_flight"] and len(flights) == IN_FLIGHT
    assert "run_end" not in kinds and all(e["event"] != "run_end" for e in events)


def test_eval_keys_name_reports_that_the_scorer_agrees_with(run, archive):
    run_dir = run[0]
    store, domain = EvalStore(run_dir), get_domain(DOMAIN)
    for node in archive.nodes.values():
        for split, key in node.eval_keys.get(DOMAIN, {}).items():
            report = store.report(key)
            assert report["overall_accuracy"] == node.scores[DOMAIN][split]
            assert report["total"] == node.samples[DOMAIN][split]
            rows = (store.folder(key) / JOURNAL).read_text().splitlines()
            ids = {json.loads(line)["id"] for line in rows}
            assert len(rows) == len(ids) == report["total"]
            assert set(report["question_ids_passed"]) | set(report["question_ids_failed"]) == ids
        if node.full_eval.get(DOMAIN):
            assert node.samples[DOMAIN] == {"train": 100, "val": 100}
    sample = next(n for n in archive.ordered() if n.full_eval.get(DOMAIN) and n.parent)
    for key in sample.eval_keys[DOMAIN].values():
        assert domain.scorer.score(domain, store.predictions(key)) == store.report(key)


def test_eval_keys_are_the_stores_address_of_the_task_agent(run, archive):
    repo, store = RunRepo(run[0] / "repo"), EvalStore(run[0])
    evaluated = [n for n in archive.ordered() if n.eval_keys]
    shared = [n for n in evaluated if n.parent and n.eval_keys == archive.nodes[n.parent].eval_keys]
    assert shared, "a child that changed only the meta agent reuses its parent's evaluations"
    hostile = archive.nodes[run[1]["hostile"]["predictions"]]
    for node in evaluated[:6] + shared[:3] + [hostile]:
        agent = repo.task_agent_hash(node.commit)
        for split, key in node.eval_keys[DOMAIN].items():
            assert key == store.key(agent, DOMAIN, split, node.samples[DOMAIN][split], TASK_MODEL)


def test_predictions_are_written_as_the_harness_and_the_loop_write_them(run, archive, tmp_path):
    run_dir, store = run[0], EvalStore(run[0])
    node = archive.nodes[run[1]["hostile"]["predictions"]]
    stopped = next(n for n in archive.nodes.values() if n.status == Status.BUDGET_STOPPED)
    partial = next(e["key"] for e in archive.events() if e.get("node_id") == stopped.node_id and e.get("rows") == 100)
    for split, key in [*node.eval_keys[DOMAIN].items(), ("train", partial)]:
        journal = Journal(store.folder(key) / JOURNAL)
        lines = (store.folder(key) / JOURNAL).read_text().splitlines()
        assert all(json.dumps(json.loads(line), default=str) == line for line in lines)
        rows = 100 if key == partial else node.samples[DOMAIN][split]
        write_predictions(shown_rows(split).head(rows), "Grading ID", journal, tmp_path / PREDICTIONS, 10**6)
        assert (store.predictions(key)).read_bytes() == (tmp_path / PREDICTIONS).read_bytes()
        loaded = read_csv_text(store.predictions(key))  # as the loop and the scorer load it
        assert list(loaded["prediction"]) == [journal.records[q]["prediction"] or "" if q in journal.records else ""
                                              for q in loaded["Grading ID"]]
    assert not store.report_path(partial).exists() and stopped.error.startswith("budget exhausted")
    domain = get_domain(DOMAIN)
    published = run_dir / "feedback" / node.node_id / DOMAIN
    train = read_csv_text(store.predictions(node.eval_keys[DOMAIN]["train"]))  # the loop reads it so
    assert (published / PREDICTIONS).read_text() == domain.feedback(train).to_csv(index=False)
    assert (published / "report.json").read_text() == store.report_path(node.eval_keys[DOMAIN]["train"]).read_text()


def test_journals_are_what_the_harness_appends_and_a_resumed_run_keeps(run, archive, tmp_path):
    run_dir, summary = run
    store, domain = EvalStore(run_dir), get_domain(DOMAIN)
    inputs = {split: {str(r[domain.question_id]): fingerprint(domain.format_inputs(r))
                      for r in domain.load(split).to_dict("records")} for split in ("train", "val")}
    started = {e["key"]: e for e in archive.events() if e["event"] == "split_start"}
    stopped = next(n for n in archive.nodes.values() if n.status == Status.BUDGET_STOPPED)
    keys = [*archive.nodes[summary["hostile"]["predictions"]].eval_keys[DOMAIN].values(),
            *(k for k, e in started.items() if e["node_id"] in (stopped.node_id, summary["evaluating"]))]
    for key in keys:
        path = store.folder(key) / JOURNAL
        kept = Journal(path)  # the harness's resume reader
        again = Journal(tmp_path / key)
        for record in kept.records.values():
            again.append(record)
        again.close()
        assert again.path.read_bytes() == path.read_bytes()
        # Each row was answered for the inputs it has: a resumed run redoes only the rows with an error.
        assert {q: r["inputs_sha"] for q, r in kept.records.items()} == \
            {q: inputs[started[key]["split"]][q] for q in kept.records}
        assert kept.done_ids() == {q for q, r in kept.records.items() if not r["error"]} != set()


def test_transcripts_are_the_tool_loops_markdown_as_the_dashboard_reads_it(run, archive, tmp_path):
    run_dir, summary = run
    reader, ledger = RunReader(run_dir), Ledger(run_dir / "ledger.sqlite")
    failed = next(n for n in archive.ordered() if n.status == Status.META_FAILED and "exit code" in n.error)
    changed = next(n for n in archive.ordered() if n.parent and n.status == Status.OK)
    attacks = summary["hostile"]["transcript"]
    ends = {changed.node_id: "usage", failed.node_id: "error", attacks: "usage", summary["evaluating"]: "usage",
            **{node_id: "user" for node_id in summary["in_flight"][1:]}}  # a meta agent at work: a tool's result
    try:
        for node_id, last in ends.items():
            text = reader.transcript(node_id)
            assert not text.missing and not text.cut
            reading = transcript.read(text.text)
            assert [t.role for t in reading.turns[:2]] == ["system", "user"] and reading.turns[-1].role == last
            agent = AgentSystem(META_MODEL, str(tmp_path / node_id))  # the meta agent's own transcript writer
            for turn in reading.turns:
                heading, _, body = turn.text.partition("\n\n")
                log_message(agent.log, {"role": heading.removeprefix("## "), "content": body})
            assert (tmp_path / node_id).read_text() == text.text
            meta_calls = ledger.totals(run_id=run_dir.name, node=node_id, role="meta").calls
            assert reading.replies == meta_calls + (node_id == attacks)
            assert reading.calls.get("bash", 0) == sum(1 for t in reading.turns if t.role == "user") - 1
    finally:
        ledger.close()


def test_the_logs_say_what_the_records_say(run, archive):
    run_dir = run[0]
    for node in archive.nodes.values():
        folder = run_dir / "nodes" / node.node_id
        if node.status == Status.META_FAILED and "exit code" in node.error:
            # The loop's error names the last line the meta agent's run printed on its stderr.
            assert node.error == f"meta agent exit code 1: {(folder / META_LOG).read_text().splitlines()[-1]}"
        if node.status == Status.LOAD_FAILED:
            assert node.error.endswith(": " + (folder / "worker.log").read_text().splitlines()[-1])


def test_nodes_are_commits_of_the_run_repository(run, archive):
    repo = RunRepo(run[0] / "repo")
    refs = dict(line.split() for line in repo.git("for-each-ref", "--format=%(refname) %(objectname)",
                                                            "refs/nodes/").splitlines())
    committed = {n.node_id: n.commit for n in archive.nodes.values() if n.commit}
    assert {f"refs/nodes/{i}": c for i, c in committed.items()}.items() <= refs.items()
    parents = dict(line.split()[:2] for line in repo.git("rev-list", "--parents", "--all").splitlines()
                   if len(line.split()) > 1)
    for node_id, commit in committed.items():
        if node_id != "initial":
            assert parents[commit] == archive.nodes[archive.nodes[node_id].parent].commit
    children = [n for n in archive.ordered() if n.commit and n.parent][:8]
    for node in children:
        patch = (run[0] / "nodes" / node.node_id / "patch.diff").read_text()
        assert patch == repo.diff(archive.nodes[node.parent].commit, node.commit) and patch.startswith("diff --git")
        added = [line for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert len(added) == node.patch["insertions"] > 0
    first, second = children[0], children[1]
    between = repo.diff(first.commit, second.commit)
    assert "task_agent/task_agent.py" in between or "meta_agent/meta_agent.py" in between


def test_the_ledger_adds_up_to_each_nodes_cost(run, archive):
    path = run[0] / "ledger.sqlite"
    ledger = Ledger(path)
    try:
        for node in list(archive.nodes.values())[:10]:
            for role, cost in node.cost_usd.items():
                spent = ledger.totals(run_id=run[0].name, node=node.node_id, role=role)
                assert round(spent.cost_usd, 6) == cost and spent.tokens == node.tokens[role]
    finally:
        ledger.close()
    db = sqlite3.connect(path)
    rows = db.execute("SELECT node, role, SUM(cost_usd), SUM(prompt_tokens + completion_tokens) FROM calls "
                      "GROUP BY node, role").fetchall()
    stamps = [t for (t,) in db.execute("SELECT ts FROM calls ORDER BY id")]
    models = {role: {m for (m,) in db.execute("SELECT DISTINCT model FROM calls WHERE role = ?", (role,))}
              for role in ("meta", "task")}
    db.close()
    booked = {(node, role): (round(cost, 6), tokens) for node, role, cost, tokens in rows}
    for node in archive.nodes.values():
        assert {r: booked[(node.node_id, r)] for r in node.cost_usd} == \
            {r: (node.cost_usd[r], node.tokens[r]) for r in node.cost_usd}
        assert "meta" in node.cost_usd or node.parent is None
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] > 3600
    assert len(models["meta"] | models["task"]) == 2
    assert {node for node, _ in booked} >= set(run[1]["in_flight"])


def test_a_generation_in_flight_has_a_partial_evaluation(run, archive):
    run_dir, summary = run
    flight = summary["evaluating"]
    assert flight == summary["in_flight"][0] and flight not in archive.nodes
    assert not (run_dir / "nodes" / flight / "node.json").exists()
    result = archive.meta_result(flight)
    assert result.status == Status.OK and result.commit == RunRepo(run_dir / "repo").node_commit(flight)
    (split,) = [e for e in archive.events() if e["event"] == "split_start" and e["node_id"] == flight]
    folder = EvalStore(run_dir).folder(split["key"])
    assert 0 < len((folder / JOURNAL).read_text().splitlines()) < split["rows"]
    assert sorted(p.name for p in folder.iterdir()) == [JOURNAL]
    for other in summary["in_flight"][1:]:
        assert archive.meta_result(other) is None
        assert not (run_dir / "nodes" / other / "patch.diff").exists()
        assert (run_dir / "untrusted" / other / "meta" / META_TRANSCRIPT).stat().st_size > 0


def test_hostile_text_is_where_agents_write(run, archive):
    run_dir, summary = run
    hostile = summary["hostile"]
    node = archive.nodes[hostile["patch"]]
    patch = (run_dir / "nodes" / node.node_id / "patch.diff").read_text()
    assert all(attack in patch for attack in ATTACKS.values())
    assert f"diff --git a/task_agent/{ATTACKS['script']}" in patch
    assert {f"task_agent/{ATTACKS[k]}" for k in ("img", "svg", "javascript_url")} == set(node.patch["dropped"])
    transcript = (run_dir / "untrusted" / node.node_id / "meta" / META_TRANSCRIPT).read_text()
    assert ATTACKS["markdown_link"] in transcript and ATTACKS["iframe"] in transcript
    store = EvalStore(run_dir)
    predictions = {json.loads(line)["prediction"] for key in node.eval_keys[DOMAIN].values()
                   for line in (store.folder(key) / JOURNAL).read_text().splitlines()}
    assert set(ATTACKS.values()) <= predictions
    logs = (run_dir / "nodes" / node.node_id / "meta_stdout.log").read_text() + \
        (run_dir / "nodes" / node.node_id / "worker.log").read_text()
    assert ATTACKS["svg"] in logs and ATTACKS["script"] in logs
    assert ATTACKS["img"] in archive.nodes[hostile["error"]].error
    meta = {what: run_dir / "untrusted" / hostile[what] / "meta" / META_TRANSCRIPT
            for what in ("symlink", "fifo", "big_transcript")}
    assert os.readlink(meta["symlink"]) == "/etc/passwd"
    assert stat.S_ISFIFO(os.lstat(meta["fifo"]).st_mode)
    assert os.lstat(meta["big_transcript"]).st_size >= BIG_TRANSCRIPT


def test_a_run_without_attacks_carries_none(tmp_path):
    summary = make_run(tmp_path / "run", 12, seed=5)
    assert summary["hostile"] == {} and summary["in_flight"] == []
    markers = ("__pwned", "<script", "onerror", "javascript:")
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file() and not path.is_symlink() and "repo" not in path.parts and path.suffix != ".sqlite":
            text = path.read_text(errors="replace")
            assert not any(m in text for m in markers), path
    assert Archive(tmp_path / "run").events()[-1]["event"] == "run_end"
