"""docs/strategies.md is what `python -m search.catalog --write` writes from the strategies' own files: every
bundled strategy of every kind is on it, and nothing else."""

import re

from search.catalog import KINDS, PAGE, page
from services.strategy_names import KINDS as NAMED_KINDS
from services.strategy_names import bundled_names


def test_the_strategies_page_is_generated_and_current():
    assert PAGE.read_text(encoding="utf-8") == page(), "run: python -m search.catalog --write"


def test_the_page_lists_exactly_the_bundled_strategies_of_every_kind():
    assert tuple(KINDS) == NAMED_KINDS
    text = page()
    for kind, (title, _) in KINDS.items():
        section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert re.findall(r"^\| `(\w+)` \|", section, re.M) == bundled_names(kind)
        assert "| `score_child_prop` | (the default, the paper's) " in text
