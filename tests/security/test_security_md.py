"""SECURITY.md's table of attacks is the suite's: every attack test has a row, every row a test."""

from pathlib import Path

import pytest
from attack_table import SECURITY_MD, table_rows

from conftest import ATTACKS

HERE = Path(__file__).resolve().parent


def test_the_table_in_security_md_lists_exactly_the_attacks_of_the_suite(request):
    collected = request.config.stash.get(ATTACKS, {})
    modules = {p.name for p in HERE.glob("test_*.py") if "mark.attack" in p.read_text()} - {Path(__file__).name}
    seen = {node_id.split("::", 1)[0].rsplit("/", 1)[-1] for ids in collected.values() for node_id in ids}
    rows = table_rows(SECURITY_MD.read_text())
    missing = sorted(set(collected) - set(rows))
    assert not missing, f"attacks without a row in SECURITY.md (run python {HERE / 'attack_table.py'}): {missing}"
    if not modules <= seen:
        pytest.skip("only part of tests/security was collected: rows without a test are checked on a full run")
    stale = sorted(set(rows) - set(collected))
    assert not stale, f"rows of SECURITY.md with no attack test: {stale}"
    assert len(rows) >= 40
