"""A sweep of seeds x parent selection strategies through the Python API, and a table of what each run found.

    python examples/api_sweep/sweep.py                                  # 2 seeds x 2 strategies, no key needed
    python examples/api_sweep/sweep.py --seeds 0 1 2 --strategies best score_child_prop pareto \
        --generations 5 --task_model openai/gpt-4o-mini --meta_model openai/gpt-4o-mini

Each (seed, strategy) is one `hyperagents.run` into OUTPUT_DIR/seed<S>_<strategy>, its plan and summary written
to the log beside that folder. Running the sweep again continues each run from its folder (`resume_from`)
instead of starting it anew, so an interrupted sweep loses at most the step that was in flight. The defaults
are small: the quick preset (the bundled local model when no provider key is set) on the task of
examples/exact_scorer, 2 generations a run. A strategy may be an installed plug-in's name (see
examples/parent_selection_plugin). One seed's runs differ only in how parents are chosen; a difference that
holds across seeds is worth more than one seed's.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

from hyperagents import Error, ProviderDown, RunView, Score, run

HERE = Path(__file__).resolve().parent
DEFAULT_SPEC = HERE.parent / "exact_scorer" / "conversions.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run seeds x parent selection strategies and tabulate the runs.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--strategies", nargs="+", default=["score_child_prop", "best"],
                        help="parent selection strategies by name (bundled or an installed plug-in's)")
    parser.add_argument("--generations", type=int, default=2, help="generations of each run")
    parser.add_argument("--domain_spec", default=str(DEFAULT_SPEC), help="the task, as a YAML spec")
    parser.add_argument("--preset", default="quick", help="a preset of configs/presets/ (quick: small sizes)")
    parser.add_argument("--config", default=None, help="a YAML config applied after the preset")
    parser.add_argument("--output_dir", default="outputs/sweep")
    parser.add_argument("--task_model", default=None)
    parser.add_argument("--meta_model", default=None)
    return parser.parse_args(argv)


def one_run(args: argparse.Namespace, seed: int, strategy: str) -> RunView:
    """The run of `seed` and `strategy`: started, or continued from its folder when it has one."""
    run_id = f"seed{seed}_{strategy}"
    folder = Path(args.output_dir) / run_id
    models = {k: v for k, v in (("task_model", args.task_model), ("meta_model", args.meta_model)) if v}
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(args.output_dir) / f"{run_id}.log", "a") as log, contextlib.redirect_stdout(log):
        if (folder / "run.json").is_file():
            # The spec again: its scorer is a function of your own, which a run's record never names for import.
            return run(resume_from=folder, domain_spec=args.domain_spec, config=args.config,
                       max_generation=args.generations, **models)
        return run(domain_spec=args.domain_spec, preset=args.preset, config=args.config, output_dir=args.output_dir,
                   run_id=run_id, name=run_id, tags=["sweep"], seed=seed, parent_selection=strategy,
                   max_generation=args.generations, **models)


def best_val(view: RunView) -> Score | None:
    """The val score of the run's best node on its first domain (None before one is scored)."""
    return view.best.scores.get(view.domains[0], {}).get("val") if view.best else None


def row(seed: int, strategy: str, view: RunView) -> list[str]:
    score = best_val(view)
    value = "-" if score is None or score.value is None else f"{score.value:.3f}"
    band = f"[{score.interval[0]:.2f}, {score.interval[1]:.2f}]" if score and score.interval else "-"
    return [str(seed), strategy, view.state, str(len(view.nodes)), view.best.id if view.best else "-", value, band,
            f"${view.cost_usd:.4f}"]


def mean_row(strategy: str, views: list[RunView]) -> list[str]:
    """A strategy's mean over seeds of its best node's val score."""
    values = [s.value for s in map(best_val, views) if s is not None and s.value is not None]
    return [strategy, f"{statistics.mean(values):.3f}" if values else "-", str(len(values))]


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: dict[tuple[int, str], RunView] = {}
    try:
        for seed in args.seeds:
            for strategy in args.strategies:
                print(f"seed {seed}, {strategy}: running (log {Path(args.output_dir) / f'seed{seed}_{strategy}.log'})",
                      flush=True)
                runs[seed, strategy] = one_run(args, seed, strategy)
    except ProviderDown as e:  # the provider or this machine failed: run the sweep again to go on
        print(f"sweep: {e}", file=sys.stderr)
        return 75
    except Error as e:  # bad input (a strategy no one has, a spec with a mistake): the command line's one line
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    header = ["seed", "strategy", "state", "nodes", "best", "val", "95% interval", "cost"]
    print(table([row(seed, strategy, view) for (seed, strategy), view in runs.items()], header))
    print()
    print(table([mean_row(name, [v for (_, s), v in runs.items() if s == name])
                 for name in args.strategies], ["strategy", "mean best val", "seeds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
