"""Archive, parent selection and the run's git repository, on real files and real git."""

import json
import math
import random
import subprocess
from collections import Counter

import pytest

from archive.eval_store import EvalStore
from archive.records import EVAL_KEY, NODE_SCHEMA, GenStart, MetaResult, Node, Status
from archive.selection import Candidate, select_parent
from archive.store import Archive, loop_sizes, observed_best, observed_sizes, run_score, selection_score
from domains.registry import get_domain
from services.errors import UserError
from services.workspace import RunRepo, discard


def cands(*scores_children):
    return [Candidate(f"n{i}", s, c, i) for i, (s, c) in enumerate(scores_children)]


def frequencies(candidates, strategy, n=20000, seed=1):
    rng = random.Random(seed)
    counts = Counter(select_parent(candidates, strategy, rng).node_id for _ in range(n))
    return {k: v / n for k, v in counts.items()}


def test_score_prop_follows_the_sigmoid_around_the_top3_mean():
    c = cands((0.9, 0), (0.5, 0), (0.4, 0), (0.1, 0))
    mid = (0.9 + 0.5 + 0.4) / 3
    w = [1 / (1 + math.exp(-10 * (s - mid))) for s in (0.9, 0.5, 0.4, 0.1)]
    freq = frequencies(c, "score_prop")
    for i, wi in enumerate(w):
        assert freq.get(f"n{i}", 0) == pytest.approx(wi / sum(w), abs=0.015)


def test_score_child_prop_discounts_nodes_with_many_children():
    c = cands((0.8, 0), (0.8, 8), (0.8, 16))
    freq = frequencies(c, "score_child_prop")
    w = [math.exp(-((k / 8) ** 3)) for k in (0, 8, 16)]
    for i, wi in enumerate(w):
        assert freq.get(f"n{i}", 0) == pytest.approx(wi / sum(w), abs=0.015)


def test_best_latest_random_and_seeded_replay():
    c = cands((0.3, 0), (0.7, 2), (0.7, 0), (0.1, 0))
    assert select_parent(c, "best", random.Random(0)).node_id == "n2"  # ties: the newer
    assert select_parent(c, "latest", random.Random(0)).node_id == "n3"
    picks = [select_parent(c, "random", random.Random(7)).node_id for _ in range(3)]
    assert picks == [select_parent(c, "random", random.Random(7)).node_id for _ in range(3)]
    assert len({select_parent(c, "random", random.Random(s)).node_id for s in range(50)}) == 4
    with pytest.raises(ValueError, match="no node can be a parent"):
        select_parent([], "best", random.Random(0))


def test_staged_only_scores_are_scaled_and_val_is_preferred(tmp_path):
    grading, proof = get_domain("imo_grading"), get_domain("imo_proof")
    sizes = {"imo_grading": 100, "imo_proof": 60}
    staged = Node("a", "initial", 1, scores={"imo_grading": {"train": 0.6}}, samples={"imo_grading": {"train": 10}},
                  full_eval={"imo_grading": False})
    full = Node("b", "initial", 1, scores={"imo_grading": {"train": 0.9, "val": 0.5}},
                samples={"imo_grading": {"train": 100, "val": 100}}, full_eval={"imo_grading": True})
    assert selection_score(staged, grading, sizes) == pytest.approx(0.06)
    assert selection_score(full, grading, sizes) == 0.5
    assert selection_score(full, proof, sizes) is None
    archive = Archive(tmp_path)
    for node in (staged, full, Node("c", "b", 2, status="load_failed")):
        archive.record(node)
    reloaded = Archive(tmp_path)
    found = reloaded.candidates([grading], sizes)
    assert [(c.node_id, round(c.score, 3), c.children) for c in found] == [("a", 0.06, 0), ("b", 0.5, 1)]



def test_the_readers_of_a_run_choose_its_best_as_the_loop_does_when_a_node_lacks_a_domains_score(tmp_path):
    """A valid node scored on one of two domains (one loop.row_error left unscored) is no parent and no best for
    the loop; the dashboard, the analysis and export read the best through observed_best, which must agree, not
    rank the node by its one score (0.45, half of 0.9, would beat the initial node's 0.25)."""
    grading, answers = get_domain("imo_grading"), get_domain("aime2025")
    both = {"imo_grading": {"val": 0.3}, "aime2025": {answers.selection_split: 0.2}}
    initial = Node("initial", None, 0, scores=both, samples={"imo_grading": {"val": 100},
                                                            "aime2025": {answers.selection_split: 30}},
                   full_eval={"imo_grading": True, "aime2025": True})
    one = Node("1", "initial", 1, scores={"imo_grading": {"val": 0.9}}, samples={"imo_grading": {"val": 100}},
               full_eval={"imo_grading": True})
    archive = Archive(tmp_path)
    for node in (initial, one):
        archive.record(node)
    sizes = {"imo_grading": 100, "aime2025": 30}
    nodes = list(archive.nodes.values())
    assert run_score(one, loop_sizes([grading, answers], sizes)) is None
    assert [c.node_id for c in archive.candidates([grading, answers], sizes)] == ["initial"]
    assert archive.best([grading, answers], sizes).node_id == "initial"
    assert observed_best(nodes, observed_sizes(["imo_grading", "aime2025"], nodes), tmp_path, {}).node_id == "initial"
    assert archive.best([grading], {"imo_grading": 100}).node_id == "1"  # on the domain it has, it is the best

def test_a_cut_log_line_is_skipped_and_the_pending_generation_found(tmp_path):
    archive = Archive(tmp_path)
    archive.log_start(GenStart("1", "initial", 1))
    archive.record(Node("1", "initial", 1))
    archive.log("gen_start", node_id="2", parent="1", generation=2)  # as runs before schema versions wrote it
    with open(archive.log_path, "a") as f:
        f.write('{"event": "meta_do')  # a kill mid-write
    again = Archive(tmp_path)
    assert [s.node_id for s in again.pending_generations()] == ["2"]
    assert again.meta_result("2") is None
    again.log_meta_result("2", MetaResult(Status.OK, "ab" * 20, {"files": 1}, 2.5))
    assert Archive(tmp_path).meta_result("2") == MetaResult(Status.OK, "ab" * 20, {"files": 1}, 2.5)


def test_records_carry_a_schema_version_and_records_of_the_older_shape_still_load(tmp_path):
    archive = Archive(tmp_path)
    archive.record(Node("1", "initial", 1, status=Status.NO_CHANGE))
    saved = json.loads((tmp_path / "nodes" / "1" / "node.json").read_text())
    assert saved["schema_version"] == NODE_SCHEMA == 5 and saved["status"] == "no_change"
    del saved["schema_version"]  # as every record was written before versions existed
    assert Node.from_dict(saved, "1").status is Status.NO_CHANGE
    with pytest.raises(ValueError, match="newer"):
        Node.from_dict({**saved, "schema_version": NODE_SCHEMA + 1}, "1")
    with pytest.raises(ValueError, match="status must be one of"):
        Node.from_dict({**saved, "status": "great"}, "1")
    # the meta agent's result, as logged before it had a type: the same fields, no version
    archive.log("meta_done", node_id="2", status="meta_failed", commit=None, patch={}, seconds=1.0, error="x")
    assert archive.meta_result("2") == MetaResult(Status.META_FAILED, None, {}, 1.0, "x")
    archive.log("meta_done", node_id="3", status="ok", commit=7, patch={}, seconds=1.0)
    with pytest.raises(UserError, match="commit must be"):
        archive.meta_result("3")


@pytest.mark.parametrize("field, value, why", [
    ("commit", "abc", "commit must be 40 hex digits"),
    ("commit", "AB" * 20, "commit must be 40 hex digits"),
    ("commit", "ab" * 20 + "\n", "commit must be 40 hex digits"),
    ("eval_keys", {"imo_grading": {"val": "../../../etc"}}, "eval_keys of 'imo_grading' 'val' must be a key"),
    ("eval_keys", {"imo_grading": {"val": "0" * 23}}, "must be a key of evals/"),
    ("eval_keys", {"imo_grading": {"val": "0" * 24 + "/x"}}, "must be a key of evals/"),
])
def test_a_node_record_with_a_commit_or_eval_key_the_core_never_makes_is_refused(tmp_path, field, value, why):
    good = {"node_id": "1", "parent": "initial", "generation": 1, "commit": "0123456789abcdef" * 2 + "01234567",
            "eval_keys": {"imo_grading": {"train": EvalStore.key("h", "imo_grading", "train", 10, "m")}}}
    assert Node.from_dict(good, "1").commit == good["commit"]
    with pytest.raises(ValueError, match=why):
        Node.from_dict({**good, field: value}, "1")
    path = tmp_path / "nodes" / "1" / "node.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**good, field: value}))
    with pytest.raises(UserError, match=f"{path}: not a node record the run wrote") as err:
        Archive(tmp_path)
    assert "\n" not in str(err.value)


def test_the_meta_agents_result_names_a_commit_or_none(tmp_path):
    archive = Archive(tmp_path)
    for node_id, commit in (("1", None), ("2", "f" * 40)):
        archive.log_meta_result(node_id, MetaResult(Status.OK, commit, {}, 1.0))
        assert archive.meta_result(node_id).commit == commit
    archive.log("meta_done", node_id="3", status="ok", commit="HEAD~1", patch={}, seconds=1.0)
    with pytest.raises(UserError, match="commit must be 40 hex digits"):
        archive.meta_result("3")


def test_the_eval_store_makes_the_keys_a_node_record_accepts():
    keys = {EvalStore.key(h, d, s, n, m) for h in ("a", "b") for d in ("imo_grading", "aime2025")
            for s in ("train", "val") for n in (10, 100) for m in ("openai/x", "local/y")}
    assert len(keys) == 32 and all(EVAL_KEY.fullmatch(k) for k in keys)


def test_run_repo_commits_changes_drops_protected_paths_and_hashes_the_task_agent(tmp_path):
    from services.config import PROJECT_ROOT

    repo = RunRepo.create(tmp_path / "repo", PROJECT_ROOT)
    base = repo.node_commit("initial")
    assert "task_agent/task_agent.py" in repo.git("ls-tree", "-r", "--name-only", base).split()
    assert not any(p.startswith("domains") for p in repo.git("ls-tree", "-r", "--name-only", base).split())
    ws = repo.checkout(base, tmp_path / "ws")
    assert not (ws / ".git").exists()  # a plain folder: nothing of the repository is in reach
    (ws / "task_agent" / "task_agent.py").write_text("# better\n")
    (ws / "task_agent" / "helper.py").write_text("X = 1\n")  # a new file counts too
    (ws / "domains").mkdir()
    (ws / "domains" / "metrics.py").write_text("cheat = True\n")
    (ws / "task_agent" / "__pycache__").mkdir(exist_ok=True)
    (ws / "task_agent" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    cap = repo.capture(ws, base, "1")
    assert cap.commit and cap.files == 2 and cap.dropped == ["domains"]
    assert cap.dropped_why == {"domains": "outside the evolvable paths"}
    assert "helper.py" in cap.patch and "cheat" not in cap.patch and ".pyc" not in cap.patch
    assert repo.node_commit("1") == cap.commit
    assert repo.task_agent_hash(cap.commit) != repo.task_agent_hash(base)
    discard(ws)

    ws = repo.checkout(cap.commit, tmp_path / "ws")
    assert (ws / "task_agent" / "helper.py").read_text() == "X = 1\n"
    (ws / "meta_agent").mkdir(exist_ok=True)
    (ws / "meta_agent" / "notes.md").write_text("only the meta agent changed\n")
    meta_only = repo.capture(ws, cap.commit, "2")
    assert repo.task_agent_hash(meta_only.commit) == repo.task_agent_hash(cap.commit)

    ws = repo.checkout(meta_only.commit, tmp_path / "ws")
    (ws / "domains").mkdir()
    (ws / "domains" / "x.py").write_text("y = 2\n")
    nothing = repo.capture(ws, meta_only.commit, "3")
    assert nothing.commit is None and nothing.dropped == ["domains"]
    with pytest.raises(subprocess.CalledProcessError):
        repo.node_commit("3")  # no ref is left for a node that changed nothing


@pytest.mark.parametrize("path", ["meta_agent/notes.py", "select_next_parent.py", "ensemble.py"])
def test_code_the_task_agent_never_runs_leaves_its_hash_alone(tmp_path, path):
    """A meta agent that writes only these keeps the task agent's results (no paid re-evaluation)."""
    from services.config import PROJECT_ROOT

    repo = RunRepo.create(tmp_path / "repo", PROJECT_ROOT)
    base = repo.node_commit("initial")
    ws = repo.checkout(base, tmp_path / "ws")
    (ws / path).parent.mkdir(exist_ok=True)
    (ws / path).write_text(f"# only {path} changed\n")
    cap = repo.capture(ws, base, "1")
    discard(ws)
    assert cap.commit and cap.files == 1
    assert repo.task_agent_hash(cap.commit) == repo.task_agent_hash(base)


def test_checkout_keeps_the_executable_bit_and_costs_the_same_at_any_depth(tmp_path):
    from services.config import PROJECT_ROOT

    repo = RunRepo.create(tmp_path / "repo", PROJECT_ROOT)
    ws = repo.checkout(repo.node_commit("initial"), tmp_path / "ws")
    (ws / "agent" / "run.sh").write_text("#!/bin/sh\n")
    (ws / "agent" / "run.sh").chmod(0o755)
    commit = repo.capture(ws, repo.node_commit("initial"), "1").commit
    again = repo.checkout(commit, tmp_path / "again")
    assert (again / "agent" / "run.sh").stat().st_mode & 0o111


def test_run_json_is_versioned_and_the_older_shape_still_reads():
    from archive.records import RUN_SCHEMA, RunRecord
    from services.config import Config

    record = RunRecord(["imo_grading"], Config().to_dict(), "bwrap")
    saved = json.loads(json.dumps(record.to_dict()))
    assert saved["schema_version"] == RUN_SCHEMA == 3 and RunRecord.from_dict(saved) == record
    older = {k: v for k, v in saved.items() if k != "schema_version"}  # as runs wrote it before versions
    assert RunRecord.from_dict(older) == record
    before_names = {k: v for k, v in saved.items() if k not in ("name", "tags")} | {"schema_version": 2}
    assert RunRecord.from_dict(before_names) == record  # schema 2 had no name and tags: none
    for bad, why in [({**saved, "domains": "imo_grading"}, "domains must be"),
                     ({**saved, "domains": []}, "at least one"),
                     ({**saved, "schema_version": 9}, "newer"), ({**saved, "extra": 1}, "unknown keys extra")]:
        with pytest.raises(ValueError, match=why):
            RunRecord.from_dict(bad)


@pytest.mark.parametrize("forged", [{"node_id": "../x", "parent": "initial", "generation": 1},
                                    {"node_id": "3", "parent": ["initial"], "generation": 3},
                                    {"node_id": "3", "parent": "initial", "generation": "3"},
                                    {"node_id": "3", "parent": "initial", "generation": -1},
                                    {"node_id": "3", "parent": "initial", "generation": 3, "schema_version": 99},
                                    {"node_id": "3", "parent": "initial", "generation": 3, "extra": 1}])
def test_a_gen_start_event_of_another_shape_stops_the_resume_with_one_line(tmp_path, forged):
    archive = Archive(tmp_path)
    archive.log_start(GenStart("1", "initial", 1))
    archive.log("gen_start", **forged)
    with pytest.raises(UserError, match="not a gen_start event the run wrote"):
        Archive(tmp_path).pending_generations()
