"""The held-out grader's parts without a loop: its record (heldout.json) written and read back checked,
the best-node rule `heldout`, the content address of a grading, the config, the estimate and the page piece.
The loop itself is tested in tests/test_heldout_grader.py."""

import json

import pytest

from archive.heldout import (
    HELDOUT,
    GenerationGap,
    Grade,
    HeldOutRecord,
    HeldOutStore,
    gap_interval,
    read_heldout,
    write_heldout,
)
from archive.promotion import BestChoice, choose_best
from services.config import ROLE_ALIASES, Config, apply_mapping
from services.errors import UserError

KEY = "0123456789abcdef01234567"


def grade(node_id: str, generation: int, optimized: float | None, heldout: float | None, **extra) -> Grade:
    return Grade(node_id, generation, "imo_proof", "openai/grader", "openai/heldout", "train", 3, KEY, optimized,
                 heldout, **extra)


def record() -> HeldOutRecord:
    found = HeldOutRecord("openai/heldout", ["imo_proof"])
    found.add(grade("initial", 0, 0.2, 0.1, gap_interval=[0.0, 0.3]))
    found.add(grade("1", 1, 0.6, 0.4))
    found.add(grade("2", 2, None, None, error="no evaluation of its train proofs to grade"))
    found.note(GenerationGap(1, "1", 0.6, 0.4))
    found.note(GenerationGap(0, "initial", 0.2, 0.1))
    return found


def test_the_record_reads_back_as_it_was_written(tmp_path):
    write_heldout(tmp_path, record())
    again = read_heldout(tmp_path)
    assert again == record()
    assert [g.generation for g in again.generations] == [0, 1]
    assert again.node_grade("1") == 0.4 and again.optimized_grade("1") == 0.6
    assert again.graded("2") and again.node_grade("2") is None  # tried and failed: not graded again
    assert not again.graded("3")
    assert json.loads((tmp_path / HELDOUT).read_text())["generations"][1]["gap"] == pytest.approx(0.2)
    assert read_heldout(tmp_path / "no such run") is None


def test_grades_of_another_model_are_kept_but_not_read():
    found = record()
    found.model = "openai/another"
    assert not found.graded("1") and found.node_grade("1") is None
    assert len(found.grades) == 3


def good() -> dict:
    return record().to_dict()


def changed(path: list, value) -> dict:
    data = good()
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize("text", [
    "{not json",
    "\xff\xfe",
    "[]",
    json.dumps({**good(), "schema_version": 2}),
    json.dumps({**good(), "extra": 1}),
    json.dumps(changed(["grades", 0, "gap"], 0.9)),  # not the difference of its grades
    json.dumps(changed(["grades", 0, "node_id"], "../x")),
    json.dumps(changed(["grades", 0, "key"], "../../etc")),
    json.dumps(changed(["grades", 0, "heldout"], "0.5")),
    json.dumps(changed(["grades", 0, "surprise"], True)),
    json.dumps(changed(["generations", 0, "best"], "nodes/1")),
    json.dumps(changed(["generations", 0, "generation"], -1)),
    json.dumps(changed(["domains"], [])),
    "1e999",
])
def test_a_garbled_record_is_a_one_line_error_naming_the_file(tmp_path, text):
    (tmp_path / HELDOUT).write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff\xfe" else b"\xff\xfe")
    with pytest.raises(UserError) as e:
        read_heldout(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / HELDOUT}: not a held-out grader's record")
    assert "\n" not in str(e.value)


def test_a_link_is_not_read(tmp_path):
    write_heldout(tmp_path / "elsewhere", record())
    (tmp_path / HELDOUT).symlink_to(tmp_path / "elsewhere" / HELDOUT)
    with pytest.raises(UserError, match="not a held-out grader's record"):
        read_heldout(tmp_path)


def test_the_dashboard_shows_a_garbled_record_as_a_problem(tmp_path):
    from apps.dashboard.pieces import heldout
    from apps.dashboard.reader import RunReader

    (tmp_path / HELDOUT).write_text("{")
    page = str(heldout(RunReader(tmp_path).read()))
    assert '<ul class="problems">' in page and "not a held-out grader&#x27;s record" in page


class Pick:
    def __init__(self, node_id: str, generation: int, score: float, heldout: float | None):
        self.node_id, self.generation, self.score, self.heldout = node_id, generation, score, heldout


def best(picks: list[Pick], rule: str, asked: list | None = None) -> str:
    def heldout(p: Pick) -> float | None:
        if asked is not None:
            asked.append(p.node_id)
        return p.heldout

    return choose_best(picks, lambda p: p.score, lambda p: {}, BestChoice(rule), heldout).node_id


def test_the_heldout_choice_passes_over_a_node_whose_heldout_grade_fell():
    picks = [Pick("initial", 0, 0.2, 0.3), Pick("1", 1, 0.5, 0.4), Pick("2", 2, 0.9, 0.1)]
    assert best(picks, "highest") == "2"
    assert best(picks, "heldout") == "1"
    # A later node that scores above the best and keeps the held-out grade replaces it, though below node 2.
    assert best([*picks, Pick("3", 3, 0.7, 0.4)], "heldout") == "3"
    assert best([*picks, Pick("3", 3, 0.7, 0.39)], "heldout") == "1"


def test_a_node_without_a_heldout_grade_never_replaces_the_best_and_an_ungraded_best_is_passed_by_score():
    assert best([Pick("initial", 0, 0.2, 0.3), Pick("1", 1, 0.9, None)], "heldout") == "initial"
    assert best([Pick("initial", 0, 0.2, None), Pick("1", 1, 0.9, 0.0)], "heldout") == "1"


def test_the_heldout_choice_asks_only_of_the_best_and_the_nodes_that_score_above_it():
    asked = []
    picks = [Pick("initial", 0, 0.5, 0.3), Pick("1", 1, 0.4, 0.9), Pick("2", 2, 0.6, 0.2), Pick("3", 3, 0.55, 0.9)]
    assert best(picks, "heldout", asked) == "3"
    assert "1" not in asked and {"initial", "2", "3"} == set(asked)
    asked.clear()
    best(picks, "highest", asked)
    assert asked == []


def test_a_grading_is_addressed_by_its_proofs_and_model():
    address = HeldOutStore.address
    assert address(b"proofs", "imo_proof_grading", "proofgrader.task_agent", "m") == \
        address(b"proofs", "imo_proof_grading", "proofgrader.task_agent", "m")
    assert len({address(b"proofs", "g", "a", "m"), address(b"proofs!", "g", "a", "m"),
                address(b"proofs", "g", "a", "n"), address(b"proofs", "g", "b", "m")}) == 4


def test_the_gap_interval_pairs_the_rows_both_grades_have():
    assert gap_interval({"a": 1.0, "b": 0.5}, {"a": 0.0, "b": 0.5, "c": 1.0}) in ([0.0, 1.0], [0.0, 0.5], [0.5, 1.0])
    assert gap_interval({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0}) == [1.0, 1.0]
    assert gap_interval({"a": 1.0}, {"b": 0.0}) is None


def test_the_config_takes_a_heldout_grader_and_the_heldout_choice():
    assert "heldout_grader" in ROLE_ALIASES
    config = Config()
    with pytest.raises(UserError, match="models.heldout_grader is not set"):
        config.resolve_model("heldout_grader")
    apply_mapping(config, {"models": {"heldout_grader": "openai/other"}, "loop": {"best_choice": "heldout"}}, "test")
    assert config.resolve_model("heldout_grader") == "openai/other"
    with pytest.raises(UserError, match="models.heldout_grader must be a model"):
        apply_mapping(Config(), {"models": {"heldout_grader": "auto"}}, "test")


def test_a_run_cannot_ask_for_what_its_domains_cannot_give():
    from domains.registry import get_domain
    from optimizer.heldout import check_heldout, heldout_models

    proofs, grading = [get_domain("imo_proof")], [get_domain("imo_grading")]
    config = apply_mapping(Config(), {"loop": {"best_choice": "heldout"}}, "test")
    with pytest.raises(UserError, match="needs models.heldout_grader"):
        check_heldout(proofs, config)
    config.models.heldout_grader, config.models.grader = "openai/x", "openai/x"
    with pytest.raises(UserError, match="is models.grader's own model"):
        check_heldout(proofs, config)
    config.models.grader = "openai/y"
    check_heldout(proofs, config)
    with pytest.raises(UserError, match="a domain graded by a grader model"):
        check_heldout(grading, config)
    assert heldout_models(proofs, config) == ["openai/x"] and heldout_models(grading, config) == []


def test_the_estimate_prices_the_heldout_grader_each_time_the_best_can_change():
    from domains.registry import get_domain
    from optimizer.estimate import estimate

    def config(grader_price: float, heldout: str | None) -> Config:
        prices = {"openai/t": [1.0, 1.0], "openai/m": [1.0, 1.0], "openai/h": [1.0, 1.0],
                  "openai/g": [grader_price, grader_price]}
        return apply_mapping(Config(), {"models": {"task": "openai/t", "meta": "openai/m", "grader": "openai/g",
                                                   "heldout_grader": heldout},
                                        "gateway": {"prices": prices}, "loop": {"max_generation": 4}}, "test")

    domains = [get_domain("imo_proof")]
    without = estimate(domains, config(1.0, None), lambda d, split: 60)
    found = estimate(domains, config(1.0, "openai/h"), lambda d, split: 60)
    assert without.heldout_usd == 0 and found.heldout_usd > 0
    # Priced as the grader is, on the 60 proofs: the initial node's, then at most one new best per generation.
    graded = found.evaluation_usd - estimate(domains, config(0.0, "openai/h"), lambda d, split: 60).evaluation_usd
    assert found.heldout_usd == pytest.approx(graded)
    assert found.run_usd == pytest.approx(without.run_usd + 5 * found.heldout_usd)
    assert "held-out grading ~$" in found.line() and "held-out" not in without.line()


def test_the_page_piece_draws_both_grades_and_escapes_what_an_error_says(tmp_path):
    from apps.dashboard.pieces import heldout, spans
    from apps.dashboard.reader import RunReader

    found = record()
    found.add(grade("3", 3, 0.7, None, error="<script>alert(1)</script>"))
    write_heldout(tmp_path, found)
    page = str(heldout(RunReader(tmp_path).read()))
    assert 'data-series="held-out grader (openai/heldout)"' in page and "Judge robustness" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert spans([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"


def test_the_console_line_says_both_grades_and_the_gap_or_why_there_is_none():
    from optimizer.heldout import grade_line

    assert grade_line(grade("1", 1, 0.6, 0.4, gap_interval=[0.1, 0.3], cost_usd=0.0123)) == (
        "held-out grader: node 1 (generation 1) imo_proof train, 3 proofs: openai/grader 0.600, held-out "
        "openai/heldout 0.400, gap +0.200 [+0.100, +0.300]; cost $0.0123")
    assert grade_line(grade("2", 2, None, None, error="no evaluation of its train proofs to grade")) == (
        "held-out grader: node 2 (generation 2) imo_proof: not graded again (no evaluation of its train proofs "
        "to grade)")
