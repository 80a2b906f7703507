"""The meta model bandit (search/meta_model_choice/) and models.meta as a list in the config."""

import random
from collections import Counter

import pytest

from search.meta_model_choice import Pull, arms
from search.meta_model_choice import choose as choose_with
from search.registry import meta_model_choice
from services.config import Config
from services.errors import UserError

MODELS = ["cheap", "strong"]


def choose(models, pulls, rule, rng):
    """The bandit's pick with the strategy named `rule`, as the loop makes it."""
    return choose_with(models, pulls, meta_model_choice(rule), rng)


def test_each_model_is_tried_once_in_order_before_any_is_preferred():
    assert choose(MODELS, [], "ucb1", random.Random(0)) == "cheap"
    assert choose(MODELS, [Pull("cheap", 0.1, 1.0)], "ucb1", random.Random(0)) == "strong"
    assert choose(MODELS, [Pull("cheap", 0.1, 1.0)], "thompson", random.Random(0)) == "strong"
    assert choose(["only"], [], "thompson", random.Random(0)) == "only"


def test_ucb1_prefers_the_model_that_gains_more_per_dollar_and_still_explores():
    # strong gains 0.05 per generation at $2; cheap gains 0.04 at $0.25: cheap gains 4x more per dollar.
    pulls = [Pull("strong", 0.05, 2.0)] * 3 + [Pull("cheap", 0.04, 0.25)] * 3
    assert choose(MODELS, pulls, "ucb1", random.Random(0)) == "cheap"
    stats = {a.model: a for a in arms(MODELS, pulls)}
    assert stats["cheap"].mean_reward == pytest.approx(0.16) and stats["strong"].mean_reward == pytest.approx(0.025)
    assert stats["cheap"].cost_usd == pytest.approx(0.75) and stats["strong"].improved == 3
    # After many pulls of cheap that stop gaining, the rarely pulled model's bonus wins again.
    stale = pulls + [Pull("cheap", 0.0, 0.25)] * 60
    assert choose(MODELS, stale, "ucb1", random.Random(0)) == "strong"


def test_thompson_draws_replay_with_a_seed_and_favour_the_likelier_cheaper_model():
    pulls = [Pull("strong", 0.1, 1.0), Pull("strong", -0.1, 1.0)] * 4 + [Pull("cheap", 0.05, 0.5)] * 7 \
        + [Pull("cheap", 0.0, 0.5)]
    picks = Counter(choose(MODELS, pulls, "thompson", random.Random(s)) for s in range(500))
    assert picks["cheap"] > 450
    assert [choose(MODELS, pulls, "thompson", random.Random(3)) for _ in range(3)] == \
        [choose(MODELS, pulls, "thompson", random.Random(3)) for _ in range(3)]


def test_a_free_generation_counts_as_a_tiny_cost_and_a_loss_as_no_gain():
    assert Pull("m", 0.1, 0.0).reward == pytest.approx(0.1 / 1e-6)
    assert Pull("m", -0.3, 1.0).reward == 0.0


def test_models_meta_may_be_a_list_or_a_comma_list_and_the_first_is_the_meta_role():
    config = Config.from_dict({"models": {"meta": ["openai/a", "openai/b"]}})
    assert config.meta_models() == ["openai/a", "openai/b"] and config.resolve_model("meta") == "openai/a"
    assert Config.from_dict({"models": {"meta": "openai/a, openai/b"}}).models.meta == ["openai/a", "openai/b"]
    assert Config.from_dict({"models": {"meta": "openai/a"}}).meta_models() == ["openai/a"]
    for bad in (["openai/a"], ["openai/a", "openai/a"], ["auto", "openai/b"], ["openai/a", 3]):
        with pytest.raises(UserError, match="models.meta must be"):
            Config.from_dict({"models": {"meta": bad}})
    with pytest.raises(UserError, match="loop.meta_bandit must be one of thompson, ucb1"):
        Config.from_dict({"loop": {"meta_bandit": "epsilon"}})
