"""Peak memory of the loop's controller with a large archive.

Fills a run folder with `--nodes` synthetic node records (scores on train and val,
a realistic mix of statuses, a random tree), then, in a fresh process that imports
what `run_optimization` imports (gateway, litellm, pandas, the loop), does what the
controller does between generations: load the archive, compute the candidates,
select a parent with every strategy, redraw the plots and report.html. The same is
done with 1 node side by side; the peak RSS (VmHWM) of both is printed with their ratio.

    python bench/controller_memory.py --nodes 100
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_MB = 600.0
STATUSES = ["ok"] * 6 + ["no_change", "load_failed", "meta_failed", "eval_failed"]

CONTROLLER = """
import json, random, sys
from pathlib import Path
import litellm, pandas  # noqa: F401  what the controller process holds anyway
from services.gateway import Gateway  # noqa: F401
from optimizer.loop import Loop  # noqa: F401
from apps.plots import write_plots
from apps.report import write_report
from archive.selection import select_parent
from services.strategy_names import strategy_names
from archive.store import Archive
from domains.registry import get_domain

run_dir = Path(sys.argv[1])
domains = [get_domain("imo_grading")]
sizes = {"imo_grading": 100}
archive = Archive(run_dir)
candidates = archive.candidates(domains, sizes)
rng = random.Random(0)
for name in strategy_names("parent_selection"):
    select_parent(candidates, name, rng)
write_plots(archive, domains, sizes, candidates[0].node_id, run_dir)
write_report(run_dir, run_dir / "report.html")
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"nodes": len(archive.nodes), "candidates": len(candidates), "peak_kb": hwm}))
"""


def fill(run_dir: Path, count: int, seed: int = 0) -> None:
    from archive.records import Node
    from archive.store import Archive

    rng = random.Random(seed)
    archive = Archive(run_dir)
    ids = ["initial"]
    archive.record(Node("initial", None, 0, scores={"imo_grading": {"train": 0.3, "val": 0.3}},
                        samples={"imo_grading": {"train": 100, "val": 100}}, full_eval={"imo_grading": True}))
    for generation in range(1, count):
        status = rng.choice(STATUSES)
        full = status == "ok" and rng.random() < 0.7
        scores = {"imo_grading": {"train": rng.random(), "val": rng.random()} if full else
                  {"train": rng.random()}} if status == "ok" else {}
        node = Node(str(generation), rng.choice(ids), generation, status=status, scores=scores,
                    samples={"imo_grading": {"train": 100, "val": 100} if full else {"train": 10}},
                    full_eval={"imo_grading": full}, cost_usd={"meta": 0.5, "task": 1.2})
        archive.record(node)
        (archive.node_dir(node.node_id) / "patch.diff").write_text("--- a\n+++ b\n" + "+ line\n" * 200)
        if status == "ok":
            ids.append(node.node_id)
    assert len(archive.nodes) == count and asdict(archive.nodes["initial"])


def measure(count: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="controller_memory_") as tmp:
        fill(Path(tmp), count)
        out = subprocess.run([sys.executable, "-c", CONTROLLER, tmp], cwd=ROOT, capture_output=True, text=True,
                             env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"})
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    args = ap.parse_args(argv)
    small, large = measure(1), measure(args.nodes)
    mb_small, mb_large = small["peak_kb"] / 1024, large["peak_kb"] / 1024
    print(f"controller with {small['nodes']:>4} node(s):  peak RSS {mb_small:.1f} MB")
    print(f"controller with {large['nodes']:>4} nodes ({large['candidates']} parents): peak RSS {mb_large:.1f} MB  "
          f"target < {TARGET_MB:.0f} MB: {'PASS' if mb_large < TARGET_MB else 'FAIL'}")
    print(f"ratio {args.nodes} nodes / 1 node: {mb_large / mb_small:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
