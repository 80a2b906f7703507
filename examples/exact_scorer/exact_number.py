"""The scorer of conversions.yaml: a prediction is right when the last number it states is exactly the
label. An agent may answer "1,440 minutes" or "The answer is 1440."; both name 1440, and neither "144"
nor "1440.5" does. A spec names it as `scorer: exact_number:score`; the run calls it on the host for
every row, with the row's columns (the label among them), and it returns True, False or a number in
[0, 1]. Only the standard library is imported here: the scorer runs in the process that holds the keys.
"""

import re

# A number as people write it: digits with optional thousands commas, an optional sign and decimals.
NUMBER = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d+(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number in `text`, its commas dropped and a trailing ".0" kept (so 1440.0 is not 1440)."""
    found = NUMBER.findall(text)
    return found[-1].replace(",", "").lstrip("+") if found else None


def score(prediction: str, row: dict) -> bool:
    return last_number(prediction) == str(row["Answer"]).strip()
