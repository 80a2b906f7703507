"""The reference's selection inputs (facebookresearch/HyperAgents @59a68f6, utils/gl_utils.py), as
`--preset paper` sets them, checked against the reference's formulas written out here by hand.

The reference scores a node for parent selection with `get_saved_score`: the val score of its
report, multiplied by the domain's staged fraction (10/100 for imo_grading) when the node did not
run the full evaluation or is the initial node; a node that only passed screening has a val score
because the reference's screening runs 10 rows of every split. `select_parent` keeps nodes that
are valid parents (the initial node always), weighs them by sigmoid(10 (s - mean of the top 3))
times exp(-(children/8)^3) for score_child_prop, and `max` breaks ties for `best` by archive order.
A meta agent that exits non-zero marks its parent invalid, the initial node excepted; its child has no
diff (run_meta_agent.py writes it only once forward() returned), so it is never evaluated.

The tests marked e2e run the loop itself (`python -m run_optimization --preset paper`) on the fake
provider, which plays the paper's agents: as the meta model it follows a script of the reference's
text tool calls per meta run, as the task model it answers "incorrect" unless the prompt carries a
marker an edit put there.
"""

import json
import math
import sqlite3

import pandas as pd
import pytest

from archive.promotion import BestChoice, choose_best
from archive.records import Node, Status
from archive.selection import Candidate, Context, probabilities, select_parent
from archive.store import Archive, ScoreRule, selection_score
from domains.registry import get_domain
from services.config import PROJECT_ROOT, load_config
from support.cli import FAST_CONFIG, run_loop

GRADING = get_domain("imo_grading")
FULL = {"imo_grading": 100}
PAPER = ScoreRule(staged_split="selection", scale_initial=True, first_stage={"imo_grading": 10})


def node(node_id, parent, generation, val, train, full, rows=100, status=Status.OK, meta_error=None):
    staged = 100 if full else 10
    return Node(node_id, parent, generation, status=status, meta_error=meta_error,
                scores={"imo_grading": {"train": train, "val": val}},
                samples={"imo_grading": {"train": staged if full else 10, "val": staged if full else 10}},
                full_eval={"imo_grading": full})


def reference_score(n: Node) -> float | None:
    """get_saved_score(split="val"), by hand: 10/100 for the initial node and every node not fully evaluated."""
    val = n.scores["imo_grading"]["val"]
    scaled = n.node_id == "initial" or not n.full_eval["imo_grading"]
    return None if val is None else val * (10 / 100 if scaled else 1)


def reference_probabilities(nodes: list[Node]) -> dict[str, float]:
    """select_parent(method="score_child_prop") of the reference, by hand."""
    barred = {n.parent for n in nodes if n.status == Status.META_FAILED or n.meta_error}
    valid = [n for n in nodes if n.node_id == "initial" or (n.status == Status.OK and n.node_id not in barred)]
    scores = {n.node_id: reference_score(n) for n in valid if reference_score(n) is not None}
    children = {i: sum(1 for n in nodes if n.parent == i) for i in scores}
    mid = sum(sorted(scores.values(), reverse=True)[:3]) / min(3, len(scores))
    weights = {i: 1 / (1 + math.exp(-10 * (s - mid))) * math.exp(-((children[i] / 8) ** 3)) for i, s in scores.items()}
    total = sum(weights.values())
    return {i: w / total for i, w in weights.items()}


ARCHIVE = [
    node("initial", None, 0, val=0.62, train=0.55, full=True),
    node("1", "initial", 1, val=0.71, train=0.60, full=True),
    node("2", "1", 2, val=0.40, train=0.0, full=False),  # stopped at the stage: 10 val rows
    node("3", "1", 3, val=0.75, train=0.65, full=True),
    # An earlier version's record: its meta agent failed, its change was evaluated anyway. It bars 3.
    node("4", "3", 4, val=0.80, train=0.70, full=True, meta_error="meta agent exited with code 4"),
    node("5", "initial", 5, val=None, train=None, full=False, status=Status.META_FAILED),  # initial stays
    node("6", "1", 6, val=None, train=None, full=False, status=Status.NO_CHANGE),
    node("7", "3", 7, val=None, train=None, full=False, status=Status.META_FAILED),  # not evaluated; bars 3 too
]


def test_selection_scores_of_staged_only_and_initial_nodes_are_the_references(tmp_path):
    for n in ARCHIVE:
        assert selection_score(n, GRADING, FULL, PAPER) == pytest.approx(reference_score(n)) \
            if reference_score(n) is not None else selection_score(n, GRADING, FULL, PAPER) is None
    # The default rule differs on both: the staged node by its train rows, the initial node unscaled.
    assert selection_score(ARCHIVE[2], GRADING, FULL) == 0.0
    assert selection_score(ARCHIVE[0], GRADING, FULL) == 0.62


def test_parent_probabilities_match_the_references_by_hand(tmp_path):
    archive = Archive(tmp_path)
    for n in ARCHIVE:
        archive.record(n)
    candidates = archive.candidates([GRADING], FULL, rule=PAPER, failed_meta_bars_parent=True)
    ours = dict(zip((c.node_id for c in candidates), probabilities(candidates, "score_child_prop")))
    theirs = reference_probabilities(ARCHIVE)
    assert set(ours) == set(theirs) == {"initial", "1", "2", "4"}  # 3 barred by 4's and 7's failed meta agents
    assert ours == pytest.approx(theirs, abs=1e-12)
    # The initial node, scaled to a tenth, is rarely chosen; under the default rule it is a peer.
    assert ours["initial"] < 0.01
    default = archive.candidates([GRADING], FULL)
    assert {c.node_id for c in default} == {"initial", "1", "2", "3", "4"}
    assert dict(zip((c.node_id for c in default), probabilities(default, "score_child_prop")))["initial"] > 0.05


def test_ties_go_to_the_earliest_node_as_the_references_max_does(tmp_path):
    tied = [Candidate("initial", 0.5, 0, 0), Candidate("1", 0.7, 2, 1), Candidate("2", 0.7, 0, 2)]
    import random

    assert select_parent(tied, "best", random.Random(0), Context(ties="earliest")).node_id == "1"
    assert select_parent(tied, "best", random.Random(0), Context(ties="latest")).node_id == "2"
    nodes = [node("initial", None, 0, 0.5, 0.5, True), node("1", "initial", 1, 0.7, 0.7, True),
             node("2", "initial", 2, 0.7, 0.7, True)]
    score = lambda n: n.scores["imo_grading"]["val"]  # noqa: E731
    assert choose_best(nodes, score, lambda n: {}, BestChoice(ties="earliest")).node_id == "1"
    assert choose_best(nodes, score, lambda n: {}, BestChoice()).node_id == "2"
    assert BestChoice.of({"ties": "earliest"}).ties == "earliest"
    with pytest.raises(ValueError, match="ties"):
        BestChoice.of({"ties": "random"})


def test_scores_equal_but_for_float_rounding_tie_unless_the_preset_compares_floats_as_the_reference_does():
    import random

    # Mathematically equal, unequal as floats: 0.1 + 0.2 is 0.30000000000000004.
    tied = [Candidate("1", 0.3, 0, 1), Candidate("2", 0.1 + 0.2, 0, 2)]
    assert select_parent(tied, "best", random.Random(0), Context()).node_id == "2"  # one score: the latest
    assert select_parent(tied, "best", random.Random(0), Context(ties="earliest")).node_id == "1"  # the earliest
    # The reference's `max(candidates, key=candidates.get)` compares the floats: the larger wins, whatever the order.
    assert select_parent(tied, "best", random.Random(0), Context(ties="earliest", tolerance=0)).node_id == "2"
    # Selection scores in the reference's arithmetic: a staged node's val times its share, 0.7 x (10/100).
    staged = node("1", "initial", 1, val=0.7, train=0.7, full=False)
    full = node("2", "initial", 2, val=0.07, train=0.07, full=True)
    assert selection_score(staged, GRADING, FULL, PAPER) == reference_score(staged) == 0.06999999999999999
    score = lambda n: selection_score(n, GRADING, FULL, PAPER)  # noqa: E731
    paper = BestChoice.of(load_config(preset="paper").loop)
    assert (paper.ties, paper.tolerance) == ("earliest", 0)
    assert choose_best([staged, full], score, lambda n: {}, paper).node_id == "2"  # 0.07 > 0.06999999999999999
    assert choose_best([staged, full], score, lambda n: {}, BestChoice(ties="earliest")).node_id == "1"  # a tie
    assert choose_best([staged, full], score, lambda n: {}, BestChoice()).node_id == "2"
    assert choose_best([staged, full], score, lambda n: {}, BestChoice(ties="earliest", rule="paired")).node_id == "1"


def test_the_paper_preset_sets_every_item():
    loop = load_config(preset="paper").loop
    assert (loop.initial_agent, loop.stage_splits, loop.staged_score, loop.scale_initial, loop.ties,
            loop.meta_failure, loop.try_command) == ("paper", "train_and_val", "selection", True, "earliest",
                                                     "parent", False)
    assert (loop.reuse_evaluations, loop.row_error, loop.initial_eval, loop.no_score, loop.tie_tolerance) == (
        False, "invalid", "stage", "initial_at_zero", 0)
    default = load_config().loop
    assert (default.reuse_evaluations, default.row_error, default.initial_eval, default.no_score,
            default.tie_tolerance) == (True, "wrong", "full", "stop", 1e-12)
    assert (loop.parent_selection, loop.promotion, loop.best_choice, loop.meta_timeout_s) == (
        "score_child_prop", "score_above", "highest", 21600)
    assert ScoreRule.of(loop, [GRADING]) == PAPER


def test_a_node_the_agent_raised_on_is_no_best_as_it_is_no_parent(tmp_path):
    # Node 1 stopped at screening with no train score (loop.row_error invalid); the initial node scores 0.
    archive = Archive(tmp_path)
    archive.record(node("initial", None, 0, val=0.0, train=0.0, full=True))
    archive.record(node("1", "initial", 1, val=None, train=None, full=False))
    assert [c.node_id for c in archive.candidates([GRADING], FULL)] == ["initial"]
    assert archive.best([GRADING], FULL).node_id == "initial"


def choosing_loop(tmp_path, **loop_settings):
    """optimizer.beginning's Beginnings of a run whose initial node did not load, and whose one child
    (generation 1) changed nothing."""
    import random
    from types import SimpleNamespace

    from archive.records import GenStart
    from optimizer.beginning import Beginnings
    from optimizer.events import Events

    config = load_config()
    for key, value in loop_settings.items():
        setattr(config.loop, key, value)
    tmp_path.mkdir()
    archive = Archive(tmp_path)
    for start, status in ((GenStart("initial", None, 0), Status.LOAD_FAILED), (GenStart("1", "initial", 1),
                                                                             Status.NO_CHANGE)):
        archive.log_start(start)
        archive.record(Node(start.node_id, start.parent, start.generation, status=status, error="no TaskAgent"))
    ctx = SimpleNamespace(run_dir=tmp_path, config=config, loop=config.loop, domains=[GRADING], full_sizes=FULL,
                          score_rule=PAPER)
    return Beginnings(ctx, archive, None, Events(), random.Random(0))  # type: ignore[arg-type]


def test_with_no_node_scored_the_run_stops_or_goes_on_from_the_initial_node_at_zero(tmp_path):
    from services.errors import UserError

    with pytest.raises(UserError, match="no node can be a parent: the initial agent is load_failed"):
        choosing_loop(tmp_path / "stop").parent(2)
    # The reference's select_parent: candidates[archive[0]] = 0.0 when none has a score.
    beginnings = choosing_loop(tmp_path / "zero", no_score="initial_at_zero")
    assert beginnings.parent(2) == "initial"
    chosen = [e for e in beginnings.archive.events() if e["event"] == "parent_chosen"]
    assert chosen[-1]["candidates"] == {"initial": {"score": 0.0, "children": 1, "p": 1.0}}


def test_the_sc_tir_recipe_is_an_initial_agent_for_aime_only():
    from optimizer.initial_agents import entry_source, get_initial_agent
    from services.errors import UserError

    recipe = get_initial_agent("sc_tir_recipe", ["aime2025"])
    assert "from task_agent.baselines.sc_tir import RecipeTaskAgent as TaskAgent" in entry_source(recipe)
    assert "import TaskAgent\n" in entry_source(get_initial_agent("sc_tir", ["imo_answer"]))
    with pytest.raises(UserError, match="does not do imo_answer"):
        get_initial_agent("sc_tir_recipe", ["imo_answer"])


# -- the loop under --preset paper, end to end ---------------------------------------------------
DATA = PROJECT_ROOT / "domains" / "imo" / "data"
LABELS = {repr(r["Response"]): r["Reward"] for split in ("train", "val")
          for r in pd.read_csv(DATA / f"gradingbench_filtered_100_{split}.csv").to_dict("records")}
RIGHT = "MARKER-RIGHT"  # a task prompt that carries it is answered with the row's true label
DIE = {"tool_name": "bash", "tool_input": {"command": "kill -9 $PPID"}}  # the meta agent's own process


def edit(marker: str) -> dict:
    """A tool call of the paper's meta agent that puts `marker` at the start of the task prompt."""
    return {"tool_name": "editor", "tool_input": {
        "command": "str_replace", "path": "/workspace/task_agent.py",
        "old_str": "You are acting as an agent.", "new_str": f"{marker} You are acting as an agent."}}


def paper_responder(script: dict[int, list[dict]]):
    """The paper's meta agent follows `script[n]` in its n-th run; its task agent answers rightly
    when the prompt carries RIGHT, else "incorrect"."""
    runs = []

    def respond(request: dict) -> str:
        messages = request["messages"]
        if "Change any part of the code base at `/workspace`" in str(messages[0]["content"]):
            turn = sum(1 for m in messages if m["role"] == "assistant")
            if turn == 0:
                runs.append(request)
            actions = script.get(len(runs), [])
            return f"<json>{json.dumps(actions[turn])}</json>" if turn < len(actions) else "Done."
        prompt = str(messages[-1]["content"])
        label = next((label for key, label in LABELS.items() if key in prompt), None)
        answer = label.lower() if label and RIGHT in prompt else "incorrect"
        return f'<json>{{"response": "{answer}"}}</json>'

    return respond


def paper_run(tmp_path, fake_openai, script: dict[int, list[dict]], *args: str, loop: str = "") -> dict[str, dict]:
    """A --preset paper run of imo_grading on 20 rows a split; its node records by id."""
    fake_openai.set_responder(paper_responder(script))
    config = tmp_path / "paper.yaml"
    config.write_text(FAST_CONFIG + "loop:\n  meta_timeout_s: 120\n  eval_samples: 20\n" + loop)
    r = run_loop(tmp_path, fake_openai, "--preset", "paper", *args, config=config, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "out" / "run" / "nodes").glob("*/node.json")}


def run_events(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out" / "run" / "archive.jsonl").read_text().splitlines()
            if line.strip()]


def task_calls(tmp_path, node_id: str) -> int:
    db = sqlite3.connect(tmp_path / "out" / "run" / "ledger.sqlite")
    return db.execute("SELECT COUNT(*) FROM calls WHERE node = ? AND role = 'task'", (node_id,)).fetchone()[0]


@pytest.mark.e2e
def test_a_failed_meta_agents_half_change_is_never_evaluated_and_its_parent_is_no_parent(tmp_path, fake_openai):
    # Generation 1 makes the task agent right; generation 2 (from node 1, the latest) edits, then its
    # meta agent dies: as the reference, node 2 has no diff to evaluate and node 1 is barred.
    nodes = paper_run(tmp_path, fake_openai, {1: [edit(RIGHT)], 2: [edit("MARKER-HALF"), DIE]},
                      "--max_generation", "3", "--parent_selection", "latest")
    assert nodes["1"]["status"] == "ok" and nodes["2"]["parent"] == "1"
    failed = nodes["2"]
    assert failed["status"] == "meta_failed" and "meta agent" in failed["error"]
    assert failed["scores"] == {} and failed["full_eval"] == {} and failed["meta_error"] is None
    assert task_calls(tmp_path, "2") == 0
    assert "MARKER-HALF" in (tmp_path / "out" / "run" / "nodes" / "2" / "patch.diff").read_text()  # kept to read
    third = next(e for e in run_events(tmp_path) if e["event"] == "parent_chosen" and e["generation"] == 3)
    assert set(third["candidates"]) == {"initial"} and nodes["3"]["parent"] == "initial"


def paid_task_calls(tmp_path, node_id: str) -> int:
    """Task calls of the node the provider was paid for (not replayed from the gateway's cache)."""
    db = sqlite3.connect(tmp_path / "out" / "run" / "ledger.sqlite")
    return db.execute("SELECT COUNT(*) FROM calls WHERE node = ? AND role = 'task' AND cache_hit = 0",
                      (node_id,)).fetchone()[0]


@pytest.mark.e2e
def test_without_reuse_a_child_that_changed_only_the_meta_agent_is_evaluated_anew_and_a_kill_pays_no_row_twice(
        tmp_path, fake_openai):
    from support.cli import cli_env, run_cli
    from support.scripted_loop import META_ONLY, events, loop_config, responder, start_and_kill_when

    fake_openai.set_responder(responder({1: [META_ONLY]}, []))
    fake_openai.latency = 0.2
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("  reuse_evaluations: false\n")
    run_dir = tmp_path / "out" / "run"
    args = ["--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id", "run",
            "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", config,
            "--max_generation", "1"]
    # Killed in the middle of node 1's evaluation (the initial node's journals hold 50 lines), then resumed.
    journal_lines = lambda d: sum(len(p.read_text().splitlines()) for p in d.glob("evals/*/predictions.jsonl"))  # noqa: E731
    start_and_kill_when(tmp_path, fake_openai, args, lambda d: any(e["event"] == "meta_done" for e in events(d))
                        and journal_lines(d) >= 65)
    r = run_cli("run_optimization", "--resume_from", str(run_dir), env=cli_env(fake_openai), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}
    initial, child = nodes["initial"], nodes["1"]
    assert child["status"] == "ok" and child["full_eval"] == {"imo_grading": True}
    # Its own evaluations, not its parent's: every key differs, every row was asked again...
    assert set(child["eval_keys"]["imo_grading"].values()).isdisjoint(initial["eval_keys"]["imo_grading"].values())
    assert paid_task_calls(tmp_path, "initial") == 40  # 10 staged rows, 10 more train, 20 val
    # ... and paid once, but for the rows in flight at the kill (5 workers).
    assert 40 <= paid_task_calls(tmp_path, "1") <= 45


def needle(split: str, index: int) -> str:
    """A piece of the answer of row `index` of imo_grading's `split` that no other row's inputs hold."""
    from domains.registry import get_domain

    domain = get_domain("imo_grading")
    others = [str(domain.format_inputs(r)) for s in ("train", "val", "test") for r in domain.load(s).to_dict("records")]
    answer = domain.load(split).to_dict("records")[index]["Response"]
    return next(piece for start in range(0, len(answer) - 40, 20)
                if sum((piece := answer[start:start + 40]) in text for text in others) == 1)


def raise_on(split: str, index: int) -> dict:
    """A tool call of the project's meta agent that makes the task agent raise on one row."""
    return {"tool_name": "editor", "tool_input": {
        "command": "str_replace", "path": "/workspace/task_agent/task_agent.py",
        "old_str": "    def forward(self, inputs: dict):\n",
        "new_str": f"    def forward(self, inputs: dict):\n        if {needle(split, index)!r} in str(inputs):\n"
                   f"            raise RuntimeError('the agent trips on this row')\n"}}


@pytest.mark.e2e
def test_a_task_agent_that_raises_on_a_row_leaves_that_evaluation_no_score_as_the_references_harness(
        tmp_path, fake_openai):
    from support.scripted_loop import loop_config, responder

    # Node 1 raises on the 4th train row: its 10-row screening has no train score, so it stops there.
    # Node 2 (from the initial node, the best) raises on the 15th val row: past the screening, its
    # full val run has no score of its own and keeps the 10 screening val rows it continued.
    fake_openai.set_responder(responder({1: [raise_on("train", 3)], 2: [raise_on("val", 14)]}, []))
    config = loop_config(tmp_path)
    with open(config, "a") as f:
        f.write("  row_error: invalid\n  stage_splits: train_and_val\n")
    r = run_loop(tmp_path, fake_openai, "--max_generation", "2", "--parent_selection", "best", config=config)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    nodes = {p.parent.name: json.loads(p.read_text()) for p in (run_dir / "nodes").glob("*/node.json")}
    one, two = nodes["1"], nodes["2"]
    assert one["status"] == "ok" and one["full_eval"] == {"imo_grading": False}
    assert one["scores"]["imo_grading"]["train"] is None and "train" not in one["eval_keys"]["imo_grading"]
    assert "raised on 1 of its 10 rows" in one["screening"]["imo_grading"][-1] and "stopped" in one["screening"][
        "imo_grading"][-1]
    assert "imo_grading/train: the task agent raised on 1 of its 10 rows" in one["error"]
    second = next(e for e in run_events(tmp_path) if e["event"] == "parent_chosen" and e["generation"] == 2)
    assert "1" not in second["candidates"] and two["parent"] == "initial"  # no score, no parent
    # Node 2: fully evaluated, its val the screening run's 10 rows (unscaled, as a full evaluation's).
    assert two["full_eval"] == {"imo_grading": True} and two["samples"]["imo_grading"] == {"train": 20, "val": 10}
    staged_val = json.loads((run_dir / "evals" / two["eval_keys"]["imo_grading"]["val"] / "report.json").read_text())
    assert staged_val["overall_accuracy"] == two["scores"]["imo_grading"]["val"]
    assert len(staged_val["row_scores"]) == 10 and "kept its first 10 rows' evaluation" in two["error"]


@pytest.mark.e2e
def test_the_initial_node_is_evaluated_on_the_stages_rows_of_each_split_only(tmp_path, fake_openai):
    # The reference's setup_initial.sh runs the initial agent on 10 rows of each split, and nothing more.
    nodes = paper_run(tmp_path, fake_openai, {}, "--max_generation", "1")
    initial = nodes["initial"]
    assert initial["full_eval"] == {"imo_grading": False}
    assert initial["samples"]["imo_grading"] == {"train": 10, "val": 10} and initial["screening"] == {}
    assert task_calls(tmp_path, "initial") == 20
    # Selected on its 10 val rows scaled by the stage's share of the full split (here 20 rows: eval_samples).
    first = next(e for e in run_events(tmp_path) if e["event"] == "parent_chosen")
    val = initial["scores"]["imo_grading"]["val"]
    assert val > 0 and first["candidates"]["initial"]["score"] == pytest.approx(val * 10 / 20)
