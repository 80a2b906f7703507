"""The README's "Set up" and "Tests" sections against what they describe: CI runs the set-up's lines and the
test command as written (in .venv inside its clone, as a new user does); and the counts of tests the
contributing page gives (docs/contributing.md, "Tests") are the suite's, to within COUNT_TOLERANCE (a few
modules skip whole where Docker or Ray is missing)."""

import re

import pytest

from conftest import COUNTS
from support.cli import REPO_ROOT
from support.docs import DOCS, README, section

COUNT_TOLERANCE = 0.10


def ci_lines() -> list[str]:
    return [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]


def test_ci_runs_the_readmes_set_up_and_test_command_as_written():
    setup = section(README, "Set up").split("```")[1].strip().splitlines()
    assert setup[0].endswith("apt-get install -y bubblewrap")  # CI installs it only where it is missing
    assert setup[1] == "python3 -m venv .venv && . .venv/bin/activate"
    assert [line for line in setup[1:] if line not in ci_lines()] == []
    # The optional install of the coding agents, which the set-up section shows after its own block: CI runs it
    # too, after the set-up, so tests/test_coding_agents.py runs each agent.
    agents = section(README, "Set up").split("```")[3].strip()
    assert agents == "python -m services.install --coding-agents" and agents in ci_lines()
    assert ci_lines().index(setup[-1]) < ci_lines().index(agents)
    test_command = section(README, "Tests").split("```")[1].strip()
    assert test_command in ci_lines()
    assert ci_lines().index(setup[1]) < ci_lines().index(test_command)


def test_the_quick_start_page_shows_the_readmes_set_up_and_the_contributing_page_its_test_command():
    assert section(DOCS / "quickstart.md", "Set up").split("```")[1] == section(README, "Set up").split("```")[1]
    assert section(README, "Tests").split("```")[1] in section(DOCS / "contributing.md", "Tests")


def test_the_readmes_counts_of_tests_are_the_suites(request):
    counts = request.config.stash.get(COUNTS, None)
    if counts is None:
        pytest.skip("only part of the suite was collected: the docs' counts are checked on a whole run")
    total, e2e = counts
    text = section(DOCS / "contributing.md", "Tests")
    stated = [int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]{2,}) tests\b", text)]
    assert len(stated) >= 2, "the Tests section gives the whole suite's count, then the fast lane's"
    for what, said, measured in (("whole suite", stated[0], total), ("fast lane", stated[1], total - e2e)):
        assert abs(said - measured) <= COUNT_TOLERANCE * measured, (
            f"docs/contributing.md's Tests section: the {what} is {said:,} tests; this collection has {measured:,}")
