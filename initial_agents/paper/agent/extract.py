"""JSON objects in a model's reply, read as the reference's `extract_jsons` (utils/common.py) reads them.

Every `<json>...</json>` block in the order it appears, then every fenced ```json ... ``` block in
the order it appears: a fenced block therefore counts as later than any tagged one, wherever it
sits in the text. Each block is stripped of surrounding whitespace and parsed; a block that is not
valid JSON is skipped. Any JSON value counts (an object, a list, a string, a number). Nothing else
is recognised: a bare object without tags or fence is not an answer.
"""

import json
import re

_TAGGED = re.compile(r"<json>(.*?)</json>", re.DOTALL)
_FENCED = re.compile(r"```json(.*?)```", re.DOTALL)


def extract_jsons(text):
    """The parsed blocks of `text`, tagged ones first; None when there is none (as the reference
    returns, so code written against it keeps working)."""
    found = []
    for pattern in (_TAGGED, _FENCED):
        for block in pattern.findall(text):
            try:
                found.append(json.loads(block.strip()))
            except json.JSONDecodeError:
                continue
    return found or None
