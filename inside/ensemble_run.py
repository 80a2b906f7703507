"""Run the workspace's own `ensemble(rows, members)` on an archive's stored predictions, inside the sandbox.

    python /opt/hyperagents/ensemble_run.py < input.json

Reads {"members": [{"node_id", "score"}, ...] (best first), "rows": [{"id", "answers": {node_id:
prediction}}, ...]} from stdin (no label, no score of a row), imports `ensemble` from the
workspace's ensemble.py (the working directory) and prints what it returns, a {row id:
prediction} mapping, as one JSON line, last. The host reads that line as untrusted data.
"""

import json
import os
import sys


def main() -> int:
    given = json.load(sys.stdin)
    sys.path.insert(0, os.getcwd())
    from ensemble import ensemble

    chosen = ensemble(given["rows"], given["members"])
    print(json.dumps(chosen, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
