"""apps.analyze on runs whose scores are chosen here, so every number is checked against a hand count."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pytest

from apps.analyze import Analysis, main
from archive.records import RunRecord
from archive.run_groups import load_groups
from services.errors import UserError
from services.fsutil import atomic_write_json
from services.ledger import Call, Ledger
from support.cli import run_cli
from support.small_runs import D, write_run


def write_report(run: Path, key: str, rows: dict[str, float]) -> None:
    report = {"schema_version": 2, "overall_accuracy": sum(rows.values()) / len(rows), "row_scores": rows}
    atomic_write_json(run / "evals" / key / "report.json", report)


@pytest.fixture
def groups(tmp_path):
    """Group a: imp@1 = [0.1, 0.3, 0.0], imp@3 = [0.3, 0.3, 0.0] (seed 3 stopped at generation 2; seed 2's
    generation 2 is staged only, 0.5 on 10 of 100 rows = 0.05). Group b: imp@1 = imp@3 = [0.4, 0.5, 0.6]."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a / "seed-1", 1, [0.2, 0.3, 0.25, 0.5])
    write_run(a / "seed-2", 2, [0.1, 0.4, 0.5, 0.35], **{"2": {"staged": True}})
    write_run(a / "seed-3", 3, [0.3, 0.3, None])
    for seed, best in ((1, 0.6), (2, 0.7), (3, 0.8)):
        write_run(b / f"seed-{seed}", seed, [0.2, best, 0.1, 0.1])
    ledger = Ledger(a / "seed-1" / "ledger.sqlite")
    for role, usd, tokens in (("meta", 0.75, 300), ("meta", 0.25, 100), ("task", 0.3, 60)):
        ledger.record(Call("seed-1", "1", role, "m", tokens // 2, tokens - tokens // 2, usd))
    ledger.close()
    atomic_write_json(b / "seed-2" / "final_test.json", {
        "schema_version": 1, "chosen_on": "val", "best": "1",
        "nodes": {"1": {D: {"score": 0.55, "rows": 60, "interval": [0.4, 0.7], "key": "a" * 24}},
                  "initial": {D: {"score": 0.2, "rows": 60, "interval": [0.1, 0.3], "key": "b" * 24}}}})
    return a, b


def rows_of(analysis: Analysis) -> dict[tuple[str, str], dict]:
    """The CSV's rows by (group, metric); numbers are rounded to 6 places there."""
    return {(r["group"], r["metric"]): r for r in csv.DictReader(io.StringIO(analysis.csv()))}


def approx(value: float):
    return pytest.approx(value, abs=1e-6)


def test_curves_imp_at_k_and_tests_match_hand_counts(groups):
    a, b = groups
    analysis = Analysis(load_groups([str(a), str(b)], []), [1, 3]).run()
    rows = rows_of(analysis)
    assert float(rows[("a", "imp@1")]["value"]) == approx(0.4 / 3)
    assert float(rows[("a", "imp@3")]["value"]) == approx(0.2)
    assert rows[("a", "imp@3")]["note"] == "1 of 3 runs stopped before generation 3"
    assert float(rows[("b", "imp@3")]["value"]) == approx(0.5)
    # Best so far, mean of [.2 .3 .3 .5], [.1 .4 .4 .4], [.3 .3 .3 .3]; the band holds the mean.
    for g, mean in enumerate([0.2, 1 / 3, 1 / 3, 0.4]):
        row = rows[("a", f"best_so_far@{g}")]
        assert float(row["value"]) == approx(mean)
        assert float(row["low"]) <= mean + 1e-9 <= float(row["high"]) + 2e-9 and row["n"] == "3"
    assert float(rows[("a", "best")]["value"]) == approx((0.5 + 0.4 + 0.3) / 3)
    # Same seeds: paired sign-flip on d = [-0.3, -0.2, -0.6]: only all-minus and all-plus reach |1.1|: 2/8.
    p = rows[("a vs b", "p:imp@1")]
    assert float(p["value"]) == approx(0.25) and p["note"] == "paired sign-flip test on 3 seeds"
    assert float(rows[("a vs b", "diff:imp@1")]["value"]) == approx(0.4 / 3 - 0.5)
    # Cost: the one run with a ledger spent $1 on meta (400 tokens) and $0.3 on task; mean over 3 runs.
    assert float(rows[("a", "cost_usd:meta")]["value"]) == approx(1 / 3)
    assert float(rows[("a", "tokens:meta")]["value"]) == approx(400 / 3)
    assert float(rows[("a", "cost_usd:task")]["value"]) == approx(0.1)
    # Test scores come from the final test only: one run of b has one.
    test = rows[("b", "test_of_best")]
    assert float(test["value"]) == approx(0.55) and test["note"] == "1 of 3 runs tested"
    assert ("a", "test_of_best") not in rows
    md = analysis.markdown()
    assert "0.550 (node 1; initial 0.200)" in md
    assert f"not evaluated: python -m run_optimization --resume_from {a / 'seed-1'} --final_test" in md


def test_groups_of_other_seeds_get_a_permutation_test(groups, tmp_path):
    a, b = groups
    for seed in (1, 2, 3):  # the same runs under seeds 4, 5, 6: not pairs any more
        record = json.loads((b / f"seed-{seed}" / "run.json").read_text())
        record["config"]["loop"]["seed"] = seed + 3
        atomic_write_json(b / f"seed-{seed}" / "run.json", record)
    analysis = Analysis(load_groups([str(a), str(b)], []), [1]).run()
    p = rows_of(analysis)[("a vs b", "p:imp@1")]
    # [0.1, 0.3, 0.0] vs [0.4, 0.5, 0.6]: of the 20 splits, only this one and its mirror are as far apart.
    assert float(p["value"]) == approx(0.1) and p["note"] == "permutation test, 3 and 3 runs"


def test_two_single_runs_are_compared_row_by_row(tmp_path):
    x, y = tmp_path / "x", tmp_path / "y"
    write_run(x, 0, [0.1, 0.8], **{"1": {"key": "1" * 24}})
    write_run(y, 0, [0.1, 0.25], **{"1": {"key": "2" * 24}})
    write_report(x, "1" * 24, {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0, "q5": 1.0})
    write_report(y, "2" * 24, {"q1": 0.0, "q2": 0.0, "q3": 0.0, "q4": 0.0, "q6": 1.0})
    analysis = Analysis(load_groups([], [f"mine={x},theirs={y}"]), [1]).run()
    rows = rows_of(analysis)
    # Shared rows q1..q4: 3 discordant, all for x: exact two-sided sign test 2 * (1/2)**3.
    p = rows[("mine vs theirs", f"p:rows:{D}/val")]
    assert float(p["value"]) == approx(0.25) and p["n"] == "4"
    assert float(rows[("mine vs theirs", f"diff:rows:{D}/val")]["value"]) == approx(0.75)
    # One run per group: no band to draw around imp@1, and the permutation test has 2 splits.
    assert rows[("mine", "imp@1")]["low"] == rows[("mine", "imp@1")]["value"]


def test_a_label_gathers_runs_into_one_group(groups):
    a, b = groups
    found = load_groups([], [f"all={a / 'seed-1'}", f"all={b / 'seed-1'}"])
    assert [g.name for g in found] == ["all"] and [r.name for r in found[0].runs] == ["a/seed-1", "b/seed-1"]


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.e2e
def test_command_writes_md_csv_png_and_leaves_runs_unchanged(groups, tmp_path):
    a, b = groups
    before = tree(tmp_path)
    out = tmp_path / "report"
    r = run_cli("apps.analyze", str(a), str(b), "--k", "1,3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "| a vs b | imp@1 | -0.367 | 0.2500 | paired sign-flip test on 3 seeds |" in r.stdout
    assert (out / "analysis.md").read_text() in r.stdout
    assert (out / "progress.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert {row["metric"] for row in csv.DictReader((out / "analysis.csv").open())} >= {"imp@1", "imp@3", "p:imp@3"}
    assert tree(tmp_path) == {**before, **{k: v for k, v in tree(tmp_path).items() if k.startswith("report/")}}


@pytest.mark.parametrize("args, message", [
    (["{tmp}/nothing"], "not a folder"),
    (["{tmp}/empty"], "not a run (no run.json) nor a folder of runs"),
    (["{a}", "--k", "0"], "--k '0': expected generations"),
    (["{a}", "--out", "{a}/seed-1/here"], "is inside the run"),
    (["--label", "nameless"], "expected NAME=PATH"),
    (["{a}", "{a}"], "two groups are named 'a'"),
    (["{forged}"], "not a node record the run wrote"),
    (["{a}", "--level", "2"], "--level 2.0: expected a confidence level"),
])
def test_bad_input_is_one_line(args, message, groups, tmp_path, capsys):
    a, _ = groups
    (tmp_path / "empty").mkdir()
    forged = write_run(tmp_path / "forged", 0, [0.1, 0.2])
    (forged / "nodes" / "1" / "node.json").write_text('{"node_id": "7"}')
    args = [x.format(tmp=tmp_path, a=a, forged=forged) for x in args]
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        main(args)
    assert not (a / "seed-1" / "here").exists()


@pytest.mark.e2e
def test_a_run_without_an_initial_score_is_refused(tmp_path):
    write_run(tmp_path / "r", 0, [None, 0.2])
    r = run_cli("apps.analyze", str(tmp_path / "r"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "the initial node has no score" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def paired_run(run: Path, best_choice: str) -> Path:
    """initial 0.5 (20 of 40), node 1 0.55 (two rows more: p = 0.25), node 2 0.525 (one row more),
    node 3 staged only: under best_choice paired the run's best stays the initial node."""
    base = {f"q{i}": float(i % 2) for i in range(40)}
    write_run(run, 0, [0.5, 0.55, 0.525, 0.9], **{"initial": {"key": "0" * 24}, "1": {"key": "1" * 24},
                                                  "2": {"key": "2" * 24}, "3": {"staged": True}})
    atomic_write_json(run / "run.json", RunRecord([D], {"loop": {"seed": 0, "best_choice": best_choice}},
                                                  "bwrap").to_dict())
    write_report(run, "0" * 24, base)
    write_report(run, "1" * 24, {**base, "q0": 1.0, "q2": 1.0})
    write_report(run, "2" * 24, {**base, "q0": 1.0})
    return run


@pytest.mark.parametrize("best_choice, best", [("highest", "1"), ("paired", "initial")])
def test_every_reader_names_the_best_node_the_run_chose(best_choice, best, tmp_path):
    from apps.dashboard.reader import RunReader
    from archive.promotion import BestChoice
    from archive.store import Archive
    from domains.registry import get_domain

    run = paired_run(tmp_path / best_choice, best_choice)
    choice = BestChoice.of({"best_choice": best_choice})
    assert Archive(run).best([get_domain(D)], {D: 100}, choice).node_id == best  # the loop, final test, transfer
    assert load_groups([str(run)], [])[0].runs[0].best().node_id == best  # apps.analyze
    assert RunReader(run).read().best().node_id == best  # the dashboard


def test_a_report_that_is_not_one_counts_as_no_rows_for_the_best_choice(tmp_path):
    from archive.promotion import BestChoice
    from archive.store import Archive
    from domains.registry import get_domain

    run = paired_run(tmp_path / "run", "paired")
    (run / "evals" / ("1" * 24) / "report.json").write_text("{not json")
    # Node 1 has no rows left to pair with: it is compared by score (0.55 > 0.5) and replaces the initial node.
    assert Archive(run).best([get_domain(D)], {D: 100}, BestChoice("paired")).node_id == "1"
