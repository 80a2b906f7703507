"""A run's name and tags (run.json "name", "tags", from --name and --tag): text a person or a script
gave, read bounded and shown escaped, never trusted."""

from __future__ import annotations

from dataclasses import fields

from archive.records import RunRecord

MAX_NAME, MAX_TAG, MAX_TAGS = 200, 64, 32  # characters of a name and of a tag, tags of a run, as pages show them
_RECORD_FIELDS = {f.name for f in fields(RunRecord)}


def without_unknown_labels(raw):
    """run.json without "name" and "tags" when this version's RunRecord does not know them (a run
    written by a newer version still reads)."""
    if not isinstance(raw, dict):
        return raw
    return {k: v for k, v in raw.items() if k in _RECORD_FIELDS or k not in ("name", "tags")}


def run_labels(raw) -> tuple[str, list[str]]:
    """The run's name and tags from run.json, bounded: text a user gave (or a script), shown escaped."""
    if not isinstance(raw, dict):
        return "", []
    name = raw.get("name")
    title = " ".join(name.split())[:MAX_NAME] if isinstance(name, str) else ""
    given = raw.get("tags")
    tags: list[str] = []
    for tag in given if isinstance(given, list) else []:
        tag = " ".join(tag.split())[:MAX_TAG] if isinstance(tag, str) else ""  # one line, within the bound
        if tag and tag not in tags:
            tags.append(tag)
    return title, tags[:MAX_TAGS]
