"""Run the workspace's own `select_next_parent(archive)` on the archive's candidates, inside the sandbox.

    python /opt/hyperagents/select_parent.py < candidates.json

Reads the candidates (a JSON list of {node_id, parent, score, generation, children, scores})
from stdin, imports `select_next_parent` from the workspace (the working directory) and
prints what it returns, as one JSON line, last. The host reads that line as untrusted data.
"""

import json
import os
import sys


def main() -> int:
    candidates = json.load(sys.stdin)
    sys.path.insert(0, os.getcwd())
    from select_next_parent import select_next_parent

    chosen = select_next_parent(candidates)
    print(json.dumps(chosen, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
