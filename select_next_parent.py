"""Parent selection the agent may rewrite (used with `run_optimization --edit_select_parent`).

`select_next_parent(archive)` gets one dict per node that can be a parent:
{"node_id", "parent", "generation", "score" (mean over domains, in [0, 1]), "children",
"scores" (domain -> split -> score)} and returns the node_id to improve next. It runs
in a sandbox; if it fails or names a node that is not in `archive`, the loop falls
back to its configured strategy. This version is the reference's score_child_prop.
"""

import math
import random


def select_next_parent(archive: list[dict]) -> str:
    top3 = sorted((n["score"] for n in archive), reverse=True)[:3]
    mid = sum(top3) / len(top3)
    weights = [1 / (1 + math.exp(-10 * (n["score"] - mid))) * math.exp(-((n["children"] / 8) ** 3))
               for n in archive]
    return random.choices(archive, weights=weights)[0]["node_id"]
