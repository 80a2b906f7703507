"""Try the workspace's current task agent on train rows, inside the sandbox, and score it.

    python /opt/hyperagents/try_agent.py [--domain D] [--rows 5 | --ids ID1,ID2] [--workers 4]

The meta agent's way to test an edit before it finishes. Rows come from the train
split with their labels (mounted read-only at /data); val and test rows are never in
the sandbox. Model calls go through the gateway under the try key, booked to the node.
"""

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# inside/answers.py, mounted beside this file; imported before the workspace is on the path.
from answers import check_output

DATA = Path("/data")


def matches(prediction: str, label: str, how: str | None) -> bool:
    """Labels compare as text; final answers as mathematics (math-verify, as the evaluation does)."""
    if how == "math":
        return check_output(prediction, label)
    return prediction.strip().lower() == label.strip().lower()


def main() -> int:
    files = sorted(DATA.glob("*_train.jsonl"))
    ap = argparse.ArgumentParser(prog="try_agent", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--domain", default=None, help=f"one of: {', '.join(f.name[:-12] for f in files)}")
    ap.add_argument("--rows", type=int, default=5, help="the first N train rows")
    ap.add_argument("--ids", default=None, help="comma-separated row ids instead of --rows")
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    domain = args.domain or files[0].name[:-12]
    rows = [json.loads(line) for line in (DATA / f"{domain}_train.jsonl").read_text().splitlines()]
    if args.ids:
        wanted = set(args.ids.split(","))
        rows = [r for r in rows if str(r["id"]) in wanted]
    else:
        rows = rows[: args.rows]
    from route import route_on_import

    route_on_import()  # as in the evaluation's worker: provider model names reach the gateway
    os.environ.update(AGENT_GATEWAY_KEY=os.environ["TRY_GATEWAY_KEY"], OPENAI_API_KEY=os.environ["TRY_GATEWAY_KEY"])
    sys.path.insert(0, os.environ.get("WORKSPACE", "/workspace"))
    from task_agent import TaskAgent

    model = os.environ["TRY_MODEL"]

    def run(row):
        try:
            prediction, _ = TaskAgent(model=model).forward(row["inputs"])
            return str(prediction), None
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        results = list(pool.map(run, rows))
    right = 0
    for row, (prediction, error) in zip(rows, results):
        label = row.get("label")
        ok = label is not None and prediction is not None and matches(prediction, str(label), row.get("match"))
        right += ok
        shown = (error or prediction or "")[:300].replace("\n", " ")
        print(f"{row['id']}\tlabel={label}\t{'OK ' if ok else 'BAD'}\t{shown}")
    if any(r.get("label") is not None for r in rows):
        print(f"accuracy {right}/{len(rows)} = {right / max(len(rows), 1):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
