"""Run the attack suite and write its table into SECURITY.md.

    python tests/security/attack_table.py            # runs tests/security, rewrites the table
    python tests/security/attack_table.py -k gateway # a subset; rows of the rest are kept

Every test marked `@pytest.mark.attack("description")` is one row; its result is given
per sandbox backend where the test runs on several (`held`, `FAILED`, or `skipped: why`).
tests/security/test_security_md.py checks that the table names every attack of the suite.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SECURITY_MD = HERE.parents[1] / "SECURITY.md"
BEGIN, END = "<!-- attacks:begin -->", "<!-- attacks:end -->"
HEADER = "| attack | test | result |\n|---|---|---|"
BACKENDS = ("bwrap", "docker")


class Results:
    """A pytest plugin: what each attack test did."""

    def __init__(self):
        self.attacks: dict[str, list[str]] = {}  # description -> node ids
        self.outcomes: dict[str, str] = {}  # node id -> held | FAILED | skipped: why

    def pytest_collection_finish(self, session):
        for item in session.items:  # after -k and -m deselected theirs
            mark = item.get_closest_marker("attack")
            if mark and mark.args:
                self.attacks.setdefault(mark.args[0], []).append(item.nodeid)

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.outcomes[report.nodeid] = "skipped: " + reason.removeprefix("Skipped: ")[:80]
        elif report.failed:
            self.outcomes[report.nodeid] = "FAILED"
        elif report.when == "call":
            self.outcomes.setdefault(report.nodeid, "held")


def backend_of(node_id: str) -> str | None:
    params = node_id.rsplit("[", 1)[-1] if node_id.endswith("]") else ""
    return next((b for b in BACKENDS if re.search(rf"\b{b}\b", params)), None)


def result_of(node_ids: list[str], outcomes: dict[str, str]) -> str:
    """One cell: the outcome per backend, or one outcome when every case agrees."""
    parts = []
    for node_id in node_ids:
        outcome = outcomes.get(node_id, "not run")
        backend = backend_of(node_id)
        part = f"{backend}: {outcome}" if backend else outcome
        if part not in parts:
            parts.append(part)
    return "; ".join(parts)


def table_rows(text: str) -> dict[str, str]:
    """The table's rows in SECURITY.md, by attack description."""
    section = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text else ""
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 3 and cells[0] not in ("attack", "---"):
            rows[cells[0].replace("\\|", "|")] = line
    return rows


def render(results: Results, old_rows: dict[str, str]) -> str:
    rows = dict(old_rows)
    for description, node_ids in results.attacks.items():
        test = node_ids[0].split("[", 1)[0].replace("tests/security/", "")
        cell = result_of(node_ids, results.outcomes).replace("|", "\\|")
        rows[description] = f"| {description.replace('|', chr(92) + '|')} | `{test}` | {cell} |"
    return "\n".join([BEGIN, HEADER, *(rows[d] for d in sorted(rows)), END])


def main(argv: list[str]) -> int:
    results = Results()
    code = pytest.main(["-q", "-p", "no:cacheprovider", str(HERE), *argv], plugins=[results])
    text = SECURITY_MD.read_text()
    table = render(results, table_rows(text) if argv else {})
    before, _, rest = text.partition(BEGIN)
    after = rest.partition(END)[2]
    SECURITY_MD.write_text(before + table + after)
    print(f"{len(results.attacks)} attacks; table written to {SECURITY_MD}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
