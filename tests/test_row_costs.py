"""What a row costs per node and domain, the accuracy-cost front, and choosing a grader by it: a real loop on
imo_grading whose fake provider answers one agent at length (dear) and another tersely (cheap)."""

import json
import sqlite3

import pandas as pd
import pytest

from archive.row_costs import FrontPoint, Tally, front, per_row, pooled, usd_text
from hyperagents import load_run
from services.errors import UserError
from support.cli import run_loop
from support.dashboard import get, serving
from support.proofgrader_runs import SyntheticRun, setup_repo
from support.scripted_loop import DATA, MARKER, TRUTH, loop_config, nodes, tool_call

TERSE = "ANSWER-IN-ONE-WORD-3"
VERBOSE = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": "You are an expert grader", "new_str": f"{MARKER} You are an expert grader"}}
SHORTEN = {"tool_name": "editor", "tool_input": {
    "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
    "old_str": MARKER, "new_str": f"{MARKER} {TERSE}"}}
# The terse grader gets the first val row wrong: 19 of 20, 0.05 behind the dear one.
MISSED = pd.read_csv(DATA / "gradingbench_filtered_100_val.csv")["Response"].iloc[0].strip()
PRICES = "  prices: {openai/fake: [0.1, 10.0]}\n"  # dollars per million tokens in, out


def responder(request: dict, meta_runs: list) -> str:
    """Generation 1's meta agent makes the grader right and wordy, generation 2's makes it terse; the task model
    answers by the marks its prompt carries."""
    messages = request["messages"]
    opening = " ".join(str(m["content"]) for m in messages[:2])
    if "/workspace" in opening and "/feedback" in opening:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn == 0:
            meta_runs.append(len(meta_runs))
        return tool_call(SHORTEN if len(meta_runs) > 1 else VERBOSE) if turn == 0 else "Done."
    user = str(messages[-1]["content"])
    if "## Student's answer" not in user:
        return "ok"
    answer = user.split("## Student's answer\n", 1)[1].rsplit("\n\nThink the verification", 1)[0].strip()
    if MARKER not in user:
        return '<json>{"response": "incorrect"}</json>'
    label = TRUTH.get(answer, "Incorrect").lower()
    if TERSE in user:
        if answer == MISSED:
            label = "incorrect" if label != "incorrect" else "correct"
        return f'<json>{{"response": "{label}"}}</json>'
    return "Let me weigh every step. " + "The step holds. " * 250 + f'<json>{{"response": "{label}"}}</json>'


@pytest.fixture(scope="module")
def costed_run(tmp_path_factory, fake_openai_session):
    """One loop for the module's tests: the initial grader, a right and wordy one (1), a terse one 0.05 behind (2)."""
    tmp_path, meta_runs = tmp_path_factory.mktemp("costed"), []
    fake_openai_session.reset()
    fake_openai_session.set_responder(lambda request: responder(request, meta_runs))
    config = loop_config(tmp_path, gateway=PRICES)
    with open(config, "a") as f:  # both graders evaluated in full: racing would stop the one behind the best on val
        f.write("  racing: false\n")
    try:
        r = run_loop(tmp_path, fake_openai_session, "--max_generation", "2", "--parent_selection", "best",
                     config=config)
    finally:
        fake_openai_session.reset()
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "out" / "run", r


def tallies(run_dir):
    return {p.parent.name: Tally.from_dict(json.loads(p.read_text())) for p in run_dir.glob("evals/*/cost.json")}


def node_cost(run_dir, node):
    return per_row(pooled(tallies(run_dir)[key] for key in node["eval_keys"]["imo_grading"].values()))


@pytest.mark.e2e
def test_a_dear_and_a_cheap_grader_are_told_apart_and_chosen_by_the_rule(costed_run, tmp_path):
    run_dir, r = costed_run
    found = nodes(run_dir)
    assert found["1"]["scores"]["imo_grading"]["val"] == 1.0 and found["2"]["scores"]["imo_grading"]["val"] == 0.95
    dear, cheap = node_cost(run_dir, found["1"]), node_cost(run_dir, found["2"])
    assert dear.usd > 5 * cheap.usd > 0 and dear.completion_tokens > 100 > cheap.completion_tokens
    # Every task call the ledger booked is in exactly one evaluation's tally: counted once, none lost.
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    booked, calls = db.execute("SELECT SUM(cost_usd), COUNT(*) FROM calls WHERE role = 'task'").fetchone()
    summed = pooled(tallies(run_dir).values())
    assert summed.calls == calls and summed.cost_usd == pytest.approx(booked, rel=1e-9)
    assert f"node 1: task agent per row: imo_grading {usd_text(dear.usd)} a row" in r.stdout

    def choose(rule):
        out = setup_repo("--generate_dir", str(run_dir), "--dst", str(tmp_path / rule), "--choose", rule, cwd=tmp_path)
        chosen = json.loads((tmp_path / rule / "proofgrader" / "provenance.json").read_text())["node_id"]
        return out, chosen

    out, chosen = choose("best")
    assert out.returncode == 0 and chosen == "1", out.stderr
    assert "chosen: node 1, by the best rule" in out.stdout
    out, chosen = choose("cheapest_within=0.1")
    assert out.returncode == 0 and chosen == "2", out.stderr
    assert (f"  node 2: val accuracy 0.950 [0.764, 0.991], {usd_text(cheap.usd)} a row" in out.stdout
            and f"  the best, node 1: val accuracy 1.000 [0.839, 1.000], {usd_text(dear.usd)} a row "
                f"({dear.usd / cheap.usd:.1f}x as much a row)" in out.stdout)
    assert "within 0.1 of the best's (point estimates; intervals below)" in out.stdout
    out, chosen = choose("cheapest_within=0.01")  # 0.95 is not within 0.01 of 1.0
    assert out.returncode == 0 and chosen == "1", out.stderr
    for bad in ("cheapest_within=nan", "cheapest_within=-0.1", "cheapest_within=2", "cheapest_within="):
        out = setup_repo("--generate_dir", str(run_dir), "--dst", str(tmp_path / "bad"), "--choose", bad,
                         cwd=tmp_path)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "a number from 0 to 1" in \
            out.stderr and not (tmp_path / "bad").exists(), out.stderr


@pytest.mark.parametrize(("given", "taken"), [("0.02", "0.02"), (".5", "0.5"), ("1", "1"), ("0", "0"),
                                              ("0_0_1", None), ("\uff11", None), (" 0.5 ", None), ("1e-400", None),
                                              ("0x1", None), ("-0", None), ("inf", None), ("1.5", None)])
def test_d_of_cheapest_within_is_a_plain_decimal_from_0_to_1(given, taken):
    from archive.grader_choice import parse_choice

    if taken is not None:
        assert parse_choice(f"cheapest_within={given}") == f"cheapest_within={taken}"
        return
    with pytest.raises(UserError, match="a number from 0 to 1") as raised:
        parse_choice(f"cheapest_within={given}")
    assert "\n" not in str(raised.value)


@pytest.mark.e2e
def test_the_front_is_on_the_dashboard_in_the_report_and_in_the_api(costed_run):
    run_dir, _ = costed_run
    found = nodes(run_dir)
    dear, cheap = node_cost(run_dir, found["1"]), node_cost(run_dir, found["2"])
    view = load_run(run_dir)
    front = {p.node_id: p for p in view.front["imo_grading"]}
    assert front["1"].on_front and front["2"].on_front and front["1"].cost.usd == pytest.approx(dear.usd)
    assert front["2"].interval == (0.7639, 0.9911) and view.nodes["2"].row_costs["imo_grading"].rows == cheap.rows
    # The initial node (everything "incorrect") is cheaper than 2 only if its prompts are: either way it is
    # beaten by none of them on both counts, or it is not on the front; the table says which.
    assert [p.node_id for p in view.front["imo_grading"] if p.on_front][-1] == "1"  # the dearest of the front
    report = (run_dir / "report.html").read_text()
    section = report.split("<h2>Accuracy and cost per row</h2>", 1)[1].split("<h2>", 1)[0]
    assert '<table class="front">' in section and "<svg" in section
    assert "<td>1</td>" in section and usd_text(dear.usd) in section and usd_text(cheap.usd) in section
    with serving(run_dir.parent) as port:
        status, _, page = get(port, "/runs/run")
        assert status == 200
        section = page.split("<h2>Accuracy and cost per row</h2>", 1)[1].split("<h2>", 1)[0]
        assert '<a href="/runs/run/nodes/2">2</a>' in section and usd_text(cheap.usd) in section
        status, _, page = get(port, "/runs/run/nodes/1")
        assert status == 200 and '<table class="row-costs">' in page and "<td>val</td>" in page


def point(node_id, score, usd):
    cost = per_row(Tally(rows=10, calls=10, cost_usd=(usd or 0) * 10, priced=usd is not None))
    return FrontPoint(node_id, int(node_id), score, None, cost)


def test_a_row_costs_the_mean_paid_call_times_its_calls_replays_at_the_paid_price_failures_at_nothing():
    # 10 rows, 30 calls: 5 failed at the provider, 5 replayed from the cache at $0, 20 paid $0.40 in all.
    cost = per_row(Tally(rows=10, calls=30, failed=5, replayed=5, cost_usd=0.40, prompt_tokens=2000,
                         completion_tokens=400, model_seconds=8.0))
    assert cost.usd == pytest.approx(0.02 * 25 / 10) and cost.prompt_tokens == pytest.approx(100 * 2.5)
    assert cost.seconds == pytest.approx(0.4 * 2.5) and cost.total_usd == 0.40
    # The same rows, paid in two passes (a budget stop, then its resume), read the same once added up.
    halves = Tally(5, 15, 3, 2, 0.20, 1000, 200, 4.0) + Tally(5, 15, 2, 3, 0.20, 1000, 200, 4.0)
    assert per_row(halves).usd == pytest.approx(cost.usd)


def test_what_is_not_known_is_unknown_never_zero():
    unpriced = per_row(Tally(rows=4, calls=4, prompt_tokens=400, completion_tokens=40, priced=False))
    assert unpriced.usd is None and unpriced.prompt_tokens == 100 and "unknown a row" in unpriced.text()
    assert per_row(Tally(rows=4, calls=4, replayed=4)).usd is None  # every call replayed: no price seen
    assert per_row(Tally(rows=4, calls=0)).usd == 0.0  # an agent that calls no model costs nothing, known
    assert per_row(Tally(rows=3, calls=3, priced=True, cost_usd=0.0)).usd == 0.0  # a local model: free
    assert (Tally(priced=True) + Tally(priced=False)).priced is False


def test_the_front_keeps_the_nodes_no_other_beats_on_both_score_and_price():
    points = front([point("1", 0.9, 0.010), point("2", 0.9, 0.005), point("3", 0.8, 0.001), point("4", 0.7, 0.002),
                    point("5", 0.95, None)])
    assert [(p.node_id, p.on_front) for p in points] == [("3", True), ("4", False), ("2", True), ("1", False),
                                                         ("5", False)]
    with pytest.raises(ValueError, match="cost_usd must be a number from 0"):
        Tally.from_dict({**Tally().to_dict(), "cost_usd": float("nan")})


def test_cheapest_within_with_no_known_price_says_so_and_its_hint_runs(tmp_path):
    run = SyntheticRun(tmp_path)  # evaluations with no cost tallied: a run made before costs were kept
    run.node("1", (0.0, 1.0))
    run.node("2", (0.05, 0.95))
    r = setup_repo("--generate_dir", str(run.dir), "--choose", "cheapest_within=0.1", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --choose cheapest_within=0.1: no node within 0.1 of the best val accuracy has a known $ per row "
        "(its task model's price is unknown, or no evaluation's cost was tallied): --choose best picks by accuracy "
        "alone"]
    r = setup_repo("--generate_dir", str(run.dir), "--choose", "best", cwd=tmp_path)
    assert r.returncode == 0 and "chosen: node 1, by the best rule" in r.stdout, r.stderr
    assert "  node 1: val accuracy 1.000, unknown a row" in r.stdout
