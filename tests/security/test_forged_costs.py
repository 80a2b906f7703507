"""A handed run folder's cost records: `evals/<key>/cost.json` (what a row cost, archive/row_costs.py) and a node
record's own costs, forged. Each is read as bounded data and refused in one line naming the file, or shown as a
problem in place; none is taken for a price, none breaks a page or raises a traceback."""

import json
import os

import pytest

from archive.records import Node
from hyperagents import UserError, load_run
from support.dashboard import get, serving
from support.proofgrader_runs import SyntheticRun, setup_repo

GOOD = {"schema_version": 1, "rows": 10, "calls": 10, "failed": 0, "replayed": 0, "cost_usd": 0.01,
        "prompt_tokens": 1000, "completion_tokens": 100, "model_seconds": 1.0, "priced": True}
FORGED = {
    "negative": json.dumps({**GOOD, "cost_usd": -1.0}),
    "nan": json.dumps({**GOOD, "cost_usd": float("nan")}),
    "infinite": json.dumps({**GOOD, "model_seconds": float("inf")}),
    "huge": json.dumps({**GOOD, "rows": 10**40}),
    "string": json.dumps({**GOOD, "cost_usd": "0.001"}),
    "markup": json.dumps({**GOOD, "priced": "<script>alert(1)</script>"}),
    "more replayed than calls": json.dumps({**GOOD, "replayed": 11}),
    "a bool for a count": json.dumps({**GOOD, "rows": True}),
    "too big": json.dumps({**GOOD, "pad": "x" * 5000}),
    "not JSON": "{",
}


def forged_run(tmp_path, cost: str | None = None, link: bool = False, fifo: bool = False,
               folder: bool = False) -> SyntheticRun:
    """Two fully evaluated graders with val scores; node 2's val evaluation holds the forged cost record."""
    run = SyntheticRun(tmp_path)
    run.node("1", (0.0, 1.0))
    run.node("2", (0.05, 0.95))
    for node_id, acc in (("1", 1.0), ("2", 0.95)):
        path = run.dir / "nodes" / node_id / "node.json"
        record = json.loads(path.read_text())
        record["scores"] = {"imo_grading": {"train": acc, "val": acc}}
        path.write_text(json.dumps(record))
        for key in record["eval_keys"]["imo_grading"].values():
            (run.dir / "evals" / key / "cost.json").write_text(json.dumps(GOOD))
    key = json.loads((run.dir / "nodes" / "2" / "node.json").read_text())["eval_keys"]["imo_grading"]["val"]
    target = run.dir / "evals" / key / "cost.json"
    target.unlink()
    if link:
        (tmp_path / "elsewhere.json").write_text(json.dumps(GOOD))
        target.symlink_to(tmp_path / "elsewhere.json")
    elif fifo:
        os.mkfifo(target)
    elif folder:
        target.mkdir()
    else:
        target.write_text(cost or "")
    return run


def refused_everywhere(tmp_path, run: SyntheticRun) -> None:
    r = setup_repo("--generate_dir", str(run.dir), "--choose", "cheapest_within=0.1", cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "cost.json: not a cost record the run wrote" in lines[0], \
        r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "proofgrader_repo").exists()
    with pytest.raises(UserError, match="cost.json: not a cost record the run wrote"):
        load_run(run.dir)
    with serving(tmp_path) as port:
        status, _, page = get(port, "/runs/run")
        assert status == 200 and "not a cost record the run wrote" in page and "<script>alert" not in page
        section = page.split("<h2>Accuracy and cost per row</h2>", 1)[1].split("<h2>", 1)[0]
        assert 'href="/runs/run/nodes/1"' in section and 'href="/runs/run/nodes/2"' not in section
        status, _, page = get(port, "/runs/run/nodes/2")
        assert status == 200 and "not a cost record the run wrote" in page and "<script>alert" not in page


@pytest.mark.attack("a handed run's evals/<key>/cost.json forged: a negative, NaN, infinite, huge, string or markup "
                    "number, more replayed calls than calls, extra keys, not JSON")
@pytest.mark.parametrize("forgery", sorted(FORGED))
def test_a_forged_cost_record_is_refused_in_one_line_and_shown_as_a_problem(tmp_path, forgery):
    refused_everywhere(tmp_path, forged_run(tmp_path, FORGED[forgery]))


@pytest.mark.attack("a handed run's evals/<key>/cost.json is a link out of the folder, a fifo or a folder")
@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_a_cost_record_that_is_a_link_or_a_fifo_is_never_followed_nor_opened(tmp_path, kind):
    refused_everywhere(tmp_path, forged_run(tmp_path, link=kind == "link", fifo=kind == "fifo",
                                            folder=kind == "folder"))
    if kind == "folder":  # said as what it is, not by the number of a descriptor
        with pytest.raises(UserError, match=r"cost.json: not a cost record the run wrote \(.*not a regular file "
                                            r"\(a folder\)\)$"):
            load_run(forged_run(tmp_path / "again", folder=True).dir)


@pytest.mark.attack("a handed node record's own costs forged: NaN, negative, infinite or huge dollars, tokens, seconds")
@pytest.mark.parametrize("field,value", [("cost_usd", float("nan")), ("cost_usd", -5.0), ("tokens", 10**400),
                                         ("seconds", float("inf")), ("cost_usd", 1e300)],
                         ids=["nan", "negative", "huge-int", "infinite", "huge"])
def test_a_node_record_with_a_forged_cost_is_refused(field, value):
    record = json.loads(json.dumps(Node("1", "initial", 1).to_dict()))
    record[field] = {"task": value}
    with pytest.raises(ValueError, match=f"{field} of 'task' must be a number from 0 to 1e"):
        Node.from_dict(record, "1")
    record[field] = {"task": 1}
    assert Node.from_dict(record, "1").node_id == "1"  # a plain amount is still one
