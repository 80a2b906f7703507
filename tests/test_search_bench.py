"""bench/search_strategies.py at a tiny size: it replays, keeps to its budget, pairs its variants,
builds the candidates and names the best node as the real archive does on the same nodes, and
models repeats (caught by novelty screening) and merges as its docstring says."""

import numpy as np
import pytest

from archive.eval_store import EvalStore
from archive.records import Node, Status
from archive.selection import lineage
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
    compared = [line.split(":")[0] for line in bench.features(first, bench.VARIANTS)]
    assert compared == [f"{strategy}{suffix} vs {strategy}" for strategy in (bench.PAPER, "pareto")
                        for suffix in ("+merge", "+novelty", "+merge+novelty")]


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
    # Novelty screening only relabels a repeat `duplicate`; the meta agent's outcome is generation g's draw.
    statuses = {tuple(Status.OK if n.status == Status.DUPLICATE else n.status for n in run.nodes) for run in runs}
    assert len(statuses) == 1
    assert all(n.status != Status.DUPLICATE for v, run in zip(bench.VARIANTS, runs) if not v.novelty
               for n in run.nodes)
    assert len({n.status for n in runs[0].nodes}) > 1
    parents = {tuple(n.parent for n in run.nodes) for run in runs}
    assert len(parents) > 1  # while the strategies do choose differently


def _recorded(run, world, tmp_path) -> Archive:
    """`run`'s nodes as the loop records them: node.json files and val reports with per-row scores."""
    archive, store = Archive(tmp_path), EvalStore(tmp_path)
    for node in run.nodes:
        record = Node(node.node_id, node.parent, node.generation, status=node.status,
                      parents=[node.parent, node.other_parent] if node.other_parent else [])
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


@pytest.mark.parametrize("variant", [bench.Variant("pareto", "pareto"), bench.Variant(bench.PAPER, bench.PAPER),
                                     bench.Variant("both", "pareto", merge_every=3, novelty=True)],
                         ids=lambda v: v.name)
def test_candidates_and_the_best_node_are_the_real_archives(variant, tmp_path):
    # With novelty, more repeats and a seed whose run has duplicates, merges and nodes that stopped at screening.
    world, seed = (bench.World(rows=20, repeat=0.5), 3) if variant.novelty else (WORLD, 2)
    run = bench.simulate(variant, world, seed, GENERATIONS, 1e6)
    # The case worth checking: nodes that are no parents, and nodes that stopped at screening (scaled scores).
    assert {n.status for n in run.nodes} - {Status.OK}
    if variant.novelty:
        assert any(n.status == Status.DUPLICATE for n in run.nodes)
        assert any(n.other_parent for n in run.nodes)
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


def test_with_novelty_repeats_cost_no_rows_and_the_same_budget_buys_more_generations():
    world = bench.World(rows=20, repeat=0.5)
    budget = 2 * world.rows * world.row_usd + 10 * world.worst_generation_usd()
    plain, screened = bench.Variant(bench.PAPER, bench.PAPER), bench.Variant("novelty", bench.PAPER, novelty=True)
    generations = {plain.name: 0, screened.name: 0}
    for seed in range(6):
        for variant in (plain, screened):
            run = bench.simulate(variant, world, seed, 100, budget)
            generations[variant.name] += run.generations
            by_id = {n.node_id: n for n in run.nodes}
            repeats = [n for n in run.nodes if n.repeats is not None]
            assert repeats
            for child in repeats:
                source, parent = by_id[child.repeats], by_id[child.parent]
                # Re-made: a change of a sibling (that sibling again) or one already in the parent (the parent again).
                sibling = source.parent == parent.node_id
                assert sibling or source.node_id in lineage(parent.node_id, {n.node_id: n.parent for n in run.nodes})
                again = source if sibling else parent
                assert np.array_equal(child.ability, again.ability)
                assert 0 < np.abs(child.offset - again.offset).max() < 0.2
                if variant.novelty:
                    assert child.status == Status.DUPLICATE and child.stage_score is None
                    assert child.node_id not in {c.node_id for c in bench.candidates(run.nodes, world, True)}
                else:
                    assert child.status == Status.OK and child.stage_score is not None  # screened and paid for
            paid = 2 * world.rows + sum(world.full_rows if n.full else world.stage_rows
                                        for n in run.nodes[1:] if n.stage_score is not None)
            assert run.spent == pytest.approx(paid * world.row_usd + run.generations * world.meta_usd)
            assert run.spent <= budget
    assert generations[screened.name] > generations[plain.name]


def test_a_merge_has_two_parents_of_other_lineages_each_better_on_some_rows():
    merging, plain = bench.Variant("merge", bench.PAPER, merge_every=3), bench.Variant(bench.PAPER, bench.PAPER)
    merges = 0
    for seed in range(4):
        run = bench.simulate(merging, WORLD, seed, 15, 1e6)
        parent_of = {n.node_id: n.parent for n in run.nodes}
        by_id = {n.node_id: n for n in run.nodes}
        for child in run.nodes:
            if child.other_parent is None:
                continue
            merges += 1
            first, second = by_id[child.parent], by_id[child.other_parent]
            assert child.generation % 3 == 0 and child.repeats is None
            assert second.node_id not in lineage(first.node_id, parent_of)
            assert first.node_id not in lineage(second.node_id, parent_of)
            assert any(second.val_rows[r] > v for r, v in first.val_rows.items())
            assert any(second.val_rows[r] < v for r, v in first.val_rows.items())
        assert all(n.other_parent is None for n in bench.simulate(plain, WORLD, seed, 15, 1e6).nodes)
    assert merges >= 2


def _change(world: bench.World) -> bench.Draws:
    """Draws of a change that moves nothing: what remains is the merge's own combination."""
    draws = bench.Draws(world, 0, 1)
    draws.outcome, draws.drift, draws.focus, draws.repeat = 0.99, 0.0, 0.0, 1.0
    draws.offset = np.zeros(3 * world.rows)
    return draws


def test_a_merge_keeps_more_of_the_parent_better_on_each_kind_and_is_no_free_improvement():
    world = bench.World(rows=40)
    task = bench.Task.draw(world, 0)
    val_kind = task.kind[world.rows:2 * world.rows]
    assert set(val_kind) == set(range(world.kinds))

    def parent(node_id: str, good_kind: int) -> bench.Node:
        ability = np.zeros(world.kinds)
        ability[good_kind] = 1.0
        node = bench.Node(node_id, 1, "initial", ability, np.zeros(3 * world.rows), full=True)
        node.val_rows = {f"{bench.DOMAIN}/v{i}": float(k == good_kind) for i, k in enumerate(val_kind)}
        return node

    first, second = parent("1", 0), parent("2", 1)
    child = bench.mutate(first, "3", 3, world, _change(world), merge=(second, task))
    assert child.other_parent == "2" and child.status == Status.OK
    # Kind 0 from the first at 0.75, kind 1 from the second at 0.75, the others half each; less the loss.
    assert child.ability == pytest.approx([0.75 - 0.1, 0.75 - 0.1, -0.1, -0.1])
    # Two alike parents: the merge is the same change as an ordinary one, only `merge_loss` worse.
    ordinary = bench.mutate(first, "3", 3, world, _change(world))
    alike = bench.mutate(first, "3", 3, world, _change(world), merge=(parent("2", 0), task))
    assert alike.ability == pytest.approx(ordinary.ability - world.merge_loss)
    assert np.all(bench.skills(alike, task) < bench.skills(ordinary, task))
