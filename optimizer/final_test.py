"""The test split, evaluated once, at the end, for the node chosen on val (and the initial node).

The loop selects parents and its best node on val (train where a domain has no val) and
never sees a test score: `loop.final_test` (`--final_test`) evaluates the test split after
the last generation is recorded, for the chosen node and for the initial node, the
baseline the improvement is measured from. The scores go to `final_test.json` at the
run's root, never into node records, so nothing the loop reads can depend on them.
Evaluations are content-addressed (EvalStore): running it again, or after a resume that
chose the same node, pays nothing.
"""

from __future__ import annotations

from pathlib import Path

from archive.experiments import FINAL_TEST, FINAL_TEST_SCHEMA, read_final_test
from archive.store import untrusted_dir
from services.fsutil import atomic_write_json



def tested_domains(domains: list) -> list:
    return [d for d in domains if "test" in d.splits]


def run_final_test(loop) -> Path | None:
    """Evaluate test for the best node and the initial node; the path of final_test.json, or None
    when no domain of the run has a test split or no node can be chosen."""
    domains = tested_domains(loop.domains)
    best = loop.best()
    if not domains or best is None:
        return None
    path = loop.run_dir / FINAL_TEST
    record = read_final_test(path) or {"schema_version": FINAL_TEST_SCHEMA, "chosen_on": "", "nodes": {}}
    record["chosen_on"] = ", ".join(sorted({d.selection_split for d in loop.domains}))
    record["best"] = best.node_id
    for node_id in dict.fromkeys([best.node_id, "initial"]):
        node = loop.archive.nodes[node_id]
        record["nodes"][node_id] = _evaluate(loop, node, domains)
        atomic_write_json(path, record)  # each node as soon as it is done: a kill loses at most one
    return path


def _evaluate(loop, node, domains: list) -> dict:
    evaluator = loop.evaluator
    transcripts = untrusted_dir(loop.run_dir, node.node_id, "final_test")
    with evaluator.node_sandbox(f"{node.node_id}-test", loop.archive.node_dir(node.node_id), transcripts) as box:
        box.fill(loop.repo, node.commit)
        scores = evaluator.evaluate_splits(domains, box, loop.repo.task_agent_hash(node.commit), "test")
    return {name: {"score": s.score, "rows": s.rows, "interval": s.interval.to_list() if s.interval else None,
                   "key": s.key} for name, s in scores.items()}


def final_test_lines(path: Path) -> list[str]:
    """What the final test found, a line per node and domain."""
    record = read_final_test(path) or {"nodes": {}}
    lines = []
    for node_id, domains in record["nodes"].items():
        role = "chosen on " + record.get("chosen_on", "val") if node_id == record.get("best") else "baseline"
        for name, s in domains.items():
            band = f" [{s['interval'][0]:.3f}, {s['interval'][1]:.3f}]" if s.get("interval") else ""
            score = "none" if s["score"] is None else f"{s['score']:.3f}"
            lines.append(f"final test: node {node_id} ({role}) {name}/test={score}{band} n={s['rows']}")
    return lines
