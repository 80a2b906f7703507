"""services/departures.py is the one list of where this project departs from the reference: the preset
file and the table of docs/paper.md are written from it, and --dry_run names every departure of a run."""

import dataclasses
import re

import pytest

from services import departures
from services.config import Config, load_config
from services.departures import DEPARTURES, departures_of, dry_run_lines, keyed
from support.cli import run_cli


def test_the_preset_and_the_docs_table_are_what_the_list_writes():
    assert departures.PRESET.read_text() == departures.preset_text(), "run python -m services.departures --write"
    page = departures.PAGE.read_text()
    assert departures.page_with_table(page) == page, "run python -m services.departures --write"


def test_the_preset_sets_each_keyed_item_to_the_references_value_and_nothing_else():
    paper, default = load_config(preset="paper"), Config()
    for d in keyed():
        assert d.value(paper) == d.paper, d.key
    assert paper.search == default.search == {}  # no strategy's own settings
    changed = {f"{s.name}.{f.name}" for s in dataclasses.fields(Config) if s.name != "search"
               for f in dataclasses.fields(getattr(paper, s.name))
               if getattr(getattr(paper, s.name), f.name) != getattr(getattr(default, s.name), f.name)}
    assert changed <= {d.key for d in keyed()}, changed - {d.key for d in keyed()}


def test_a_key_the_config_sends_here_is_in_the_list_and_every_item_says_why():
    text = (departures.PROJECT_ROOT / "services" / "config_sections.py").read_text()
    pointed = set(re.findall(r"^    (\w+): .*services/departures\.py", text, re.M))
    assert len(pointed) >= 8, pointed
    assert {k.split(".")[1] for k in (d.key for d in keyed())} >= pointed, pointed
    for d in DEPARTURES:
        assert d.item and d.reference and d.default and d.why, d
        assert (d.why == "-") == (d.default == "the same" or d.default.startswith("the same (")), d.item
        assert bool(d.key) != (d.applies is not None) or d.why == "-", d.item


def test_the_default_departs_wherever_it_differs_and_the_preset_only_where_no_key_reverts_it():
    default_keys = {d.key for d in departures_of(Config(), ["imo_grading"]) if d.key}
    assert default_keys == {d.key for d in keyed() if d.why != "-"}
    paper = departures_of(load_config(preset="paper"), ["imo_grading"])
    assert paper and all(not d.key for d in paper)
    assert "the data" in {d.item for d in paper}
    assert "the data" not in {d.item for d in departures_of(load_config(preset="paper"), ["aime2025"])}
    assert "AIME 2025" in {d.item for d in departures_of(load_config(preset="paper"), ["aime2025"])}


def test_a_value_of_neither_the_reference_nor_the_default_is_the_runs_own_and_the_default_says_why():
    config = load_config(preset="paper")
    config.loop.parent_selection, config.loop.ties = "pareto", "latest"
    lines = dry_run_lines(config, ["imo_grading"])
    assert lines[:2] == [
        "departs  loop.ties latest (the reference's: earliest): of equals, the later one is the more evolved",
        "         loop.parent_selection pareto (the reference's: score_child_prop): this run's own setting"]


@pytest.mark.parametrize("extra, expected", [
    ([], "loop.meta_failure child (the reference's: parent): one crash of a sampled run says little"),
    (["--preset", "paper"], "a row whose model call failed at the provider: an outage is not the agent's answer"),
    (["--preset", "paper", "--set", "loop.promotion=sica"],
     "loop.promotion sica (the reference's: score_above): this run's own setting"),
])
def test_the_dry_run_prints_the_departures(tmp_path, extra, expected):
    r = run_cli("run_optimization", "--domain", "imo_grading", "--task_model", "openai/o4-mini", "--meta_model",
                "openai/o4-mini", "--output_dir", str(tmp_path), "--dry_run", *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    departs = lines[next(i for i, line in enumerate(lines) if line.startswith("departs")):-1]
    assert departs and all(line.startswith("departs  " if i == 0 else "         ") for i, line in enumerate(departs))
    assert any(line[9:].startswith(expected) for line in departs), r.stdout
    keyed_lines = [line for line in departs if line[9:].startswith(("loop.", "harness."))]
    assert len(keyed_lines) == {0: 18, 2: 0, 4: 1}[len(extra)], keyed_lines
    assert lines[-1] == "dry run: nothing started"
