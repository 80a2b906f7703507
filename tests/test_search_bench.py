"""bench/search_strategies.py at a tiny size: it replays, keeps to its budget, pairs its variants,
and builds the candidates and names the best node as the real archive does on the same nodes."""

import pytest

from archive.eval_store import EvalStore
from archive.records import Node, Status
from archive.store import Archive
from bench import search_strategies as bench
from domains.registry import get_domain

WORLD = bench.World(rows=20)
GENERATIONS = 12


def test_the_same_seeds_give_the_same_table():
    first = bench.compare(bench.VARIANTS, WORLD, seeds=3, generations=6, budget_usd=100.0)
    again = bench.compare(bench.VARIANTS, WORLD, seeds=3, generations=6, budget_usd=100.0)
    assert first == again
    assert bench.table(first) == bench.table(again)
    assert [name for name in first] == [v.name for v in bench.VARIANTS] and bench.VARIANTS[0].name == bench.PAPER


def test_no_variant_spends_more_than_the_budget_and_a_tight_one_ends_runs_early():
    worst = WORLD.worst_generation_usd()
    budget = 2 * WORLD.rows * WORLD.row_usd + 3.5 * worst  # the initial evaluation and three and a half generations
    for variant in bench.VARIANTS:
        for seed in range(3):
            run = bench.simulate(variant, WORLD, seed, GENERATIONS, budget)
            assert run.spent <= budget
            assert 3 <= run.generations < GENERATIONS  # room for 3 worst cases, never for all 12
            paid = 2 * WORLD.rows + sum(WORLD.full_rows if n.full else WORLD.stage_rows
                                        for n in run.nodes[1:] if n.stage_score is not None)
            assert run.spent == pytest.approx(paid * WORLD.row_usd + run.generations * WORLD.meta_usd)
            assert len(run.nodes) == run.generations + 1
    roomy = bench.simulate(bench.VARIANTS[0], WORLD, 0, GENERATIONS, 1e6)
    assert roomy.generations == GENERATIONS


def test_generation_g_draws_the_same_outcome_in_every_variant():
    runs = [bench.simulate(v, WORLD, 5, GENERATIONS, 1e6) for v in bench.VARIANTS]
    statuses = {tuple(n.status for n in run.nodes) for run in runs}
    assert len(statuses) == 1  # the meta agent's outcome is generation g's draw, whoever the parent
    assert len({n.status for n in runs[0].nodes}) > 1
    parents = {tuple(n.parent for n in run.nodes) for run in runs}
    assert len(parents) > 1  # while the strategies do choose differently


def _recorded(run, world, tmp_path) -> Archive:
    """`run`'s nodes as the loop records them: node.json files and val reports with per-row scores."""
    archive, store = Archive(tmp_path), EvalStore(tmp_path)
    for node in run.nodes:
        record = Node(node.node_id, node.parent, node.generation, status=node.status)
        if node.stage_score is not None:
            found = {"train": (node.stage_score, world.stage_rows, None)}
            if node.full:
                key = EvalStore.key(node.node_id, bench.DOMAIN, "val", world.rows, "sim")
                store.save_report(key, {"row_scores": {k.split("/", 1)[1]: v for k, v in node.val_rows.items()}})
                found = {"train": (node.stage_score, world.rows, None), "val": (node.selection_score(world),
                                                                                world.rows, key)}
            record.scores = {bench.DOMAIN: {s: v[0] for s, v in found.items()}}
            record.samples = {bench.DOMAIN: {s: v[1] for s, v in found.items()}}
            record.eval_keys = {bench.DOMAIN: {s: v[2] for s, v in found.items() if v[2]}}
            record.full_eval = {bench.DOMAIN: node.full}
        archive.record(record)
    return Archive(tmp_path)


@pytest.mark.parametrize("strategy", ["pareto", "score_child_prop"])
def test_candidates_and_the_best_node_are_the_real_archives(strategy, tmp_path):
    world = WORLD
    run = bench.simulate(bench.Variant(strategy, strategy), world, 2, GENERATIONS, 1e6)
    # The case worth checking: nodes that are no parents, and nodes that stopped at screening (scaled scores).
    assert {n.status for n in run.nodes} - {Status.OK}
    assert any(not n.full and n.stage_score is not None for n in run.nodes)
    archive = _recorded(run, world, tmp_path)
    domains, sizes = [get_domain(bench.DOMAIN)], {bench.DOMAIN: world.rows}
    real = archive.candidates(domains, sizes, with_rows=True)
    mine = bench.candidates(run.nodes, world, with_rows=True)
    assert [(c.node_id, c.children, c.order, c.generation, c.parent, dict(c.rows)) for c in mine] == \
        [(c.node_id, c.children, c.order, c.generation, c.parent, dict(c.rows)) for c in real]
    assert [c.score for c in mine] == pytest.approx([c.score for c in real])
    best = archive.best(domains, sizes)
    assert best is not None and run.best(world).node_id == best.node_id
