"""A search strategy's own settings: `search.<name>` in the config (not flat loop fields), checked against the
strategy's Settings before a run starts; the keys that moved there (loop.islands, loop.migrate_every) still read,
so an older run resumes; a plug-in strategy takes settings the same way."""

import pytest

from search.parent_selection import Candidate, Context
from search.parent_selection.islands import Islands, Settings
from search.registry import CONFIGURED, configure, load_named, strategy
from services.config import Config, load_config
from services.errors import UserError
from services.flags import apply_settings


@pytest.fixture(autouse=True)
def _fresh():
    CONFIGURED.clear()
    yield
    CONFIGURED.clear()


def test_the_islands_settings_reach_the_strategy_and_change_its_draw():
    config = Config.from_dict({"loop": {"parent_selection": "islands"}, "search": {"islands": {"islands": 2}}})
    load_named(config)
    made = strategy("parent_selection", "islands")
    assert isinstance(made, Islands) and made.settings == Settings(2, 10)
    archive = [Candidate("initial", 0.1, 0, 0, 0, None)] + [Candidate(str(g), 0.2, 0, g, g, "initial")
                                                             for g in range(1, 5)]
    # generation 5 on 2 islands is island 1: nodes 1 and 3 (and the initial node); on 4 islands it would be node 1
    chances = made.weights(archive, Context(generation=5))
    assert [c.node_id for c, w in zip(archive, chances) if w > 0] == ["initial", "1", "3"]
    configure({})
    assert strategy("parent_selection", "islands").settings == Settings(4, 10)  # the bundled default again


def test_the_keys_that_moved_still_read_from_a_file_a_flag_and_an_older_runs_record():
    old = Config.from_dict({"loop": {"islands": 3, "migrate_every": 7, "seed": 1}})  # a run.json of before
    assert old.search == {"islands": {"islands": 3, "migrate_every": 7}} and old.loop.seed == 1
    assert "islands" not in old.to_dict()["loop"] and Config.from_dict(old.to_dict()) == old
    flagged = apply_settings(load_config(), ["loop.islands=5", "search.islands={migrate_every: 2}"])
    assert flagged.search == {"islands": {"islands": 5, "migrate_every": 2}}  # merged, not put in place
    for search in ({"islands": 5}, ["islands"]):  # a moved key beside a misshapen section: its shape refused
        with pytest.raises(UserError, match=r"^search must be a mapping of strategy name"):
            Config.from_dict({"loop": {"islands": 2}, "search": search})
    # The paired tests' old keys: promotion_test was both tests'; one mapping giving a key and its new setting
    # two values is refused (which one was meant?); the same value, or a later --set, is no conflict.
    old = Config.from_dict({"loop": {"promotion_level": 0.2, "promotion_test": "bootstrap", "best_level": 0.01}})
    assert old.search == {"not_worse_than_parent": {"level": 0.2, "test": "bootstrap"},
                          "paired": {"level": 0.01, "test": "bootstrap"}}
    with pytest.raises(UserError, match=r"^loop.best_level and search.paired.level are one setting given twice "
                                        r"\(0.1, 0.2\): keep search.paired.level$"):
        Config.from_dict({"loop": {"best_level": 0.1}, "search": {"paired": {"level": 0.2}}})
    assert Config.from_dict({"loop": {"best_level": 0.1}, "search": {"paired": {"level": 0.1}}}).search == {
        "paired": {"level": 0.1}}
    assert apply_settings(load_config(), ["search.paired.level=0.2", "loop.best_level=0.1"]).search == {
        "paired": {"level": 0.1}}


@pytest.mark.parametrize("search, message", [
    ({"islandz": {"islands": 2}}, r"search.islandz: no strategy is named islandz \(known: .*islands"),
    ({"islands": {"count": 2}}, r"search.islands.count: islands has no such setting \(it has islands, migrate_every\)"),
    ({"islands": {"islands": "two"}}, r"search.islands.islands must be an integer, got 'two'"),
    ({"islands": {"islands": 0}}, r"search.islands: islands must be from 1 to 64, got 0"),
    ({"best": {"x": 1}}, r"search.best: the parent selection strategy best takes no settings"),
])
def test_a_bad_setting_is_one_line_before_the_run(search, message):
    with pytest.raises(UserError, match=message):
        load_named(Config.from_dict({"search": search}))


@pytest.mark.parametrize("search", [["islands"], {"islands": 2}, {"two words": {}}, {"islands": {"a-b": 1}},
                                    {"islands": {"islands": "x" * 5000}}])
def test_the_search_section_is_checked_for_its_shape_when_the_config_is_read(search):
    with pytest.raises(UserError, match=r"search must be a mapping of strategy name -> its settings"):
        Config.from_dict({"search": search})
