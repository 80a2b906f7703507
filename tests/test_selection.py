"""Parent selection beyond the reference (issue 30): GEPA's per-row Pareto front and islands,
as pure functions of the candidates; the loop's use of them is in tests/test_search_loop.py."""

import random
from collections import Counter

import pytest

from archive.selection import Candidate, Context, island_members, probabilities, select_parent
from search.parent_selection.islands import Islands, Settings


def node(node_id, score, rows, order, generation=None, parent="initial", children=0):
    return Candidate(node_id, score, children, order, order if generation is None else generation, parent, rows)


def test_pareto_weighs_each_node_by_the_rows_it_alone_leads_on():
    # Four rows. a leads on r1 and r2, b on r3, c ties a on r1 only (dominated: a keeps r1), d leads nowhere.
    cands = [node("a", 0.50, {"r1": 1, "r2": 1, "r3": 0, "r4": 0}, 0),
             node("b", 0.40, {"r1": 0, "r2": 0, "r3": 1, "r4": 0.5}, 1),
             node("c", 0.45, {"r1": 1, "r2": 0.5, "r3": 0, "r4": 0.25}, 2),
             node("d", 0.30, {"r1": 0, "r2": 0, "r3": 0, "r4": 0.5}, 3)]
    p = dict(zip("abcd", probabilities(cands, "pareto")))
    # Fronts: r1 {a, c}, r2 {a}, r3 {b}, r4 {b, d}. d (lowest mean) shares its only front with b: dropped;
    # c shares r1 with a: dropped. a leads on r1, r2 and b on r3, r4.
    assert p == {"a": 0.5, "b": 0.5, "c": 0.0, "d": 0.0}


def test_a_node_best_on_one_hard_row_survives_a_much_lower_mean():
    strong = node("strong", 0.9, {f"r{i}": 1.0 for i in range(9)} | {"hard": 0.0}, 0)
    niche = node("niche", 0.1, {f"r{i}": 0.0 for i in range(9)} | {"hard": 1.0}, 1)
    p = probabilities([strong, niche], "pareto")
    assert p == [0.9, pytest.approx(0.1)]
    assert probabilities([strong, niche], "score_child_prop")[1] < 0.02  # the paper's rule all but drops it


def test_equal_nodes_keep_the_one_ties_prefers():
    rows = {"r1": 1.0, "r2": 0.0}
    twins = [node("old", 0.5, rows, 0), node("new", 0.5, rows, 1)]
    assert probabilities(twins, "pareto", Context(ties="latest")) == [0.0, 1.0]
    assert probabilities(twins, "pareto", Context(ties="earliest")) == [1.0, 0.0]


def test_pareto_without_rows_falls_back_to_score_child_prop_and_staged_nodes_are_off_the_front():
    no_rows = [node("a", 0.6, {}, 0), node("b", 0.2, {}, 1)]
    assert probabilities(no_rows, "pareto") == probabilities(no_rows, "score_child_prop")
    mixed = [node("full", 0.3, {"r1": 0.0}, 0), node("staged", 0.9, {}, 1)]
    assert probabilities(mixed, "pareto") == [1.0, 0.0]


def test_pareto_draws_in_proportion_and_replays_with_a_seed():
    cands = [node("a", 0.5, {"r1": 1, "r2": 1, "r3": 1, "r4": 0}, 0), node("b", 0.3, {"r1": 0, "r4": 1}, 1)]
    counts = Counter(select_parent(cands, "pareto", random.Random(s)).node_id for s in range(4000))
    assert counts["a"] / 4000 == pytest.approx(0.75, abs=0.03)
    assert [select_parent(cands, "pareto", random.Random(9)).node_id for _ in range(5)] == \
        [select_parent(cands, "pareto", random.Random(9)).node_id for _ in range(5)]


def island_archive(generations):
    """The initial node and one child per generation 1..n, each a bit better than the last."""
    return [Candidate("initial", 0.1, 0, 0, 0, None)] + [
        Candidate(str(g), 0.1 + g / 100, 0, g, g, "initial") for g in range(1, generations + 1)]


def test_each_generation_draws_from_its_own_island_and_the_initial_node():
    cands = island_archive(8)
    members = island_members(cands, Context(generation=9), Settings(4, 100))
    assert [c.node_id for c, m in zip(cands, members) if m] == ["initial", "1", "5"]  # 9 mod 4 = 1
    chances = probabilities(cands, Islands(Settings(4, 100)), Context(generation=9))
    assert {c.node_id for c, p in zip(cands, chances) if p > 0} == {"initial", "1", "5"}


def test_each_island_receives_the_previous_islands_best_at_every_migration():
    cands = island_archive(12)
    # Island 1 at generation 13, after migrations at generations 4, 8 and 12: island 0's best each time.
    members = island_members(cands, Context(generation=13), Settings(4, 4))
    assert {c.node_id for c, m in zip(cands, members) if m} == {"initial", "1", "5", "9", "4", "8", "12"}
    # Island 2 at generation 10, after migrations at 4 and 8: island 1's best then was 1, then 5.
    cands = island_archive(9)
    members = island_members(cands, Context(generation=10), Settings(4, 4))
    assert {c.node_id for c, m in zip(cands, members) if m} == {"initial", "2", "6", "1", "5"}
    one = island_members(cands, Context(generation=13), Settings(1, 4))
    assert all(one)  # a single island is the whole archive
