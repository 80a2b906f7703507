"""Pull structured answers out of free model text.

Models wrap answers in many ways: <json>...</json>, ```json fences, a bare object,
or just a word. These helpers accept all of them, last answer wins (models often
restate a draft before the final one).
"""

from __future__ import annotations

import json
import re

_JSON_TAG = re.compile(r"<json>\s*(.*?)\s*</json>", re.S | re.I)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def _objects_in(text: str) -> list[dict]:
    """Every top-level JSON object found by scanning balanced braces."""
    found, decoder, i = [], json.JSONDecoder(), 0
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = end
    return found


def extract_jsons(text: str) -> list[dict]:
    """JSON objects in `text`, in order: <json> tags first choice, then fences, then bare objects."""
    for pattern in (_JSON_TAG, _FENCE):
        blocks = pattern.findall(text or "")
        objects = [o for block in blocks for o in _objects_in(block)]
        if objects:
            return objects
    return _objects_in(text or "")


def extract_field(text: str, key: str = "response"):
    """The value of `key` in the last JSON object that has it, or None."""
    for obj in reversed(extract_jsons(text)):
        if key in obj:
            return obj[key]
    return None


def extract_label(text: str, labels: list[str], key: str = "response") -> str | None:
    """One of `labels` (lower case) from a model's answer, or None if it names none.

    Tries the JSON field, then the answer as a bare word, then the last label word
    mentioned in the text.
    """
    wanted = [label.lower() for label in labels]
    value = extract_field(text, key)
    if isinstance(value, str) and value.strip().lower() in wanted:
        return value.strip().lower()
    bare = (text or "").strip().strip("*.`'\"").lower()
    if bare in wanted:
        return bare
    # Longest labels first so "incorrect" is not read as "correct".
    alternatives = "|".join(sorted(map(re.escape, wanted), key=len, reverse=True))
    mentions = re.findall(rf"\b({alternatives})\b", str(value) if value is not None else text or "", re.I)
    if not mentions and value is not None:
        mentions = re.findall(rf"\b({alternatives})\b", text or "", re.I)
    return mentions[-1].lower() if mentions else None
