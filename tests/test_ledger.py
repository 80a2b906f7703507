"""The ledger of model calls: totals by filters, and the roles a node's calls were made in."""

from services.ledger import REFUSED, Call, Ledger


def test_totals_and_roles_of_a_nodes_calls(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for role, cost in [("meta", 0.5), ("task", 0.1), ("judge", 0.2), ("task", 0.1), ("new_role", 0.05)]:
        ledger.record(Call("run", "1", role, "m", prompt_tokens=10, completion_tokens=5, cost_usd=cost))
    ledger.record(Call("run", "2", "grader", "m", cost_usd=1.0))
    ledger.record(Call("run", "1", "try", "m", error=f"{REFUSED} over its calls"))
    assert ledger.roles(run_id="run", node="1") == ["meta", "task", "judge", "new_role", "try"]
    task = ledger.totals(run_id="run", node="1", role="task")
    assert (task.calls, task.tokens, round(task.cost_usd, 6)) == (2, 30, 0.2)
    refused = ledger.totals(run_id="run", node="1", role="try")
    assert (refused.calls, refused.refused) == (0, 1)  # a refused request is no call: _book_costs skips it
    ledger.close()


def test_refusals_are_counted_in_place_and_older_refused_rows_still_count(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for _ in range(1000):
        ledger.refuse("run", "1", "task", "401 authentication_error", "unknown gateway key")
    ledger.refuse("run", "1", "task", "403 permission_error", "model 'm' is not allowed", 5)
    ledger.record(Call("run", "1", "task", "m", error=f"{REFUSED} 400 field 'x' is not allowed"))  # an older row
    rows = ledger.refusals(run_id="run", node="1")
    assert [(r["reason"], r["count"]) for r in rows] == [("401 authentication_error", 1000),
                                                        ("403 permission_error", 5)]
    spent = ledger.totals(run_id="run", node="1", role="task")
    assert (spent.calls, spent.errors, spent.refused) == (0, 0, 1006)
    ledger.close()
    from services.ledger import LedgerReader

    read = LedgerReader(tmp_path / "ledger.sqlite")
    assert [(r["reason"], r["count"]) for r in read.refusals("1")] == [
        ("401 authentication_error", 1000), ("403 permission_error", 5), ("400", 1)]
    assert read.spend("1") == []  # refusals are no spending
