"""docs/configuration.md is what `python -m services.config_reference --write` writes from services/config.py:
every key of every section, with its type, its default and the comment beside it, and nothing else."""

import dataclasses
import re

import yaml

from services import config_reference
from services.config import Config, load_config
from support.docs import DOCS, section


def test_the_configuration_page_is_generated_and_current():
    assert config_reference.PAGE.read_text(encoding="utf-8") == config_reference.page(), (
        "run: python -m services.config_reference --write")


def test_every_key_is_on_the_page_once_with_its_default_and_its_reason():
    config = load_config()
    assert "## `search`\n\n`dict`, empty by default: a search strategy's own settings" in config_reference.page()
    for s in dataclasses.fields(Config):
        if not dataclasses.is_dataclass(getattr(config, s.name)):
            continue  # `search`: its keys are the strategies' (docs/strategies.md), checked above
        listed = re.findall(r"^- \*\*`(\w+)`\*\* \(`[^`]+`, default `([^`]*)`\): \S", section(
            DOCS / "configuration.md", f"`{s.name}`"), re.M)
        keys = [f.name for f in dataclasses.fields(getattr(config, s.name))]
        assert [name for name, _ in listed] == keys, s.name  # each with a comment: config.py's rule
        for name, default in listed:
            assert default == config_reference.shown(getattr(getattr(config, s.name), name)), f"{s.name}.{name}"


def test_a_comment_is_read_by_the_tokenizer_not_cut_at_a_hash_in_a_string():
    notes, fields = config_reference.field_notes(Config)
    assert notes == [] and set(fields) == {f.name for f in dataclasses.fields(Config)}

    @dataclasses.dataclass
    class Probe:
        # shared by both fields
        first: str = "a # b"  # the first, "quoted" # with a hash
        second: int = 2

    notes, fields = config_reference.field_notes(Probe)
    assert notes == ["shared by both fields"]
    assert fields == {"first": ("str", 'the first, "quoted" # with a hash'), "second": ("int", "")}


def test_the_pages_example_file_is_a_valid_config(tmp_path):
    example = re.search(r"```yaml\n(.*?)```", config_reference.INTRO, re.S).group(1)
    path = tmp_path / "c.yaml"
    path.write_text(example)
    loaded = load_config(path)
    for key, values in yaml.safe_load(example).items():
        for name, value in values.items():
            assert getattr(getattr(loaded, key), name) == value
