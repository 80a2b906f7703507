"""The fixed train/val/test split of IMO-AnswerBench v2: 100/100/200, stratified by category.

    python -m domains.imo.answerbench_split   # writes answerbench_split.json (already in the repository)

Runs compare only if they split alike, so the split is a file in the repository, not
something recomputed at run time; this module says how it was made and checks it.
Within each category the ids are shuffled with a fixed seed and spread evenly over
one sequence (item i of n at position (i + 0.5) / n), whose first 100 ids are train,
the next 100 val and the rest test: every split gets each category's share, +-1.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from domains.imo.data import DATA_DIR, load_csv

SPLIT_FILE = Path(__file__).with_name("answerbench_split.json")
SOURCE = DATA_DIR / "answerbench_v2.csv"
SIZES = {"train": 100, "val": 100, "test": 200}
SEED = 42


def make_split() -> dict[str, list[str]]:
    df = load_csv(SOURCE, ["Problem ID", "Category"])
    rng = random.Random(SEED)
    placed = []
    for category in sorted(df["Category"].unique()):
        ids = sorted(df.loc[df["Category"] == category, "Problem ID"])
        rng.shuffle(ids)
        placed += [((i + 0.5) / len(ids), category, qid) for i, qid in enumerate(ids)]
    order = [qid for _, _, qid in sorted(placed)]
    split, start = {}, 0
    for name, size in SIZES.items():
        split[name] = order[start:start + size]
        start += size
    return split


def load_split() -> dict[str, list[str]]:
    return json.loads(SPLIT_FILE.read_text())["splits"]


def main() -> None:
    SPLIT_FILE.write_text(json.dumps({"seed": SEED, "source": SOURCE.name, "splits": make_split()}, indent=1) + "\n")
    print(f"wrote {SPLIT_FILE}")


if __name__ == "__main__":
    main()
