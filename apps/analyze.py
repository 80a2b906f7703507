"""Compare groups of runs as the paper does: progress with confidence bands, imp@k, the best node's
scores, cost per role, and a test between every two groups.

    python -m apps.analyze outputs/dgm_h outputs/transfer --k 10,50
    python -m apps.analyze --label initial=outputs/a,transfer=outputs/b --out analysis/transfer

Each argument is a group: a run folder (run.json), a folder of replicates (group.json, from
`run_optimization --replicates K`) or any folder whose subfolders are runs. `--label NAME=PATH`
names a group; the same NAME given for several paths puts those runs in one group.

- Progress: per run, the best selection score reached by each generation (generation 0 is the
  initial node), then the mean over the group's runs with a bootstrap band (whole runs resampled).
- imp@k, as the paper defines it: the best score among the nodes of generations 0..k minus the
  initial node's. Scores are the loop's own selection scores (val where a domain has one, else
  train; the mean over the run's domains; a node with only the staged evaluation counts its
  staged score scaled by its share of the rows), so imp@k never reads test.
- The best node of each run with its score and interval, and its test score when the run's final
  test measured it (`run_optimization --resume_from RUN --final_test`).
- Cost and tokens per role, from each run's ledger, as a mean over the group's runs, with the prompt
  tokens providers read from their prompt caches and the dollars that saved.
- Between two groups, for each k: a paired sign-flip test of imp@k when both groups ran the same
  seeds, else a permutation test; for two single runs, also an exact paired test of their best
  nodes on the rows both were evaluated on.

It prints a markdown report and writes it with a CSV (group, metric, value, low, high, n, note)
and progress.png to --out (default: analysis/ in the folder that holds the runs). Read only: it
never writes inside a run folder and calls no model.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

from archive.run_folder import ledger_of
from archive.run_groups import Group, Run, load_groups
from search.stats import Estimate, bootstrap_band, bootstrap_mean, paired_p, permutation_p
from services.cli_parser import ArgumentParser
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_bytes, atomic_write_text, guard_folder, make_folder
from services.render import console, csv_cell

DEFAULT_K = "10,50"


def _caching(run: Run) -> dict[str, tuple[int, float]]:
    """Per role, the prompt tokens a run's providers read from their caches and the dollars that saved (none for
    a run without a ledger, or whose ledger predates them)."""
    caching: dict[str, tuple[int, float]] = {}
    for row in ledger_of(run.path).spend():
        tokens, usd = caching.get(row["role"], (0, 0.0))
        caching[row["role"]] = (tokens + row["cached_tokens"], usd + row["cache_saved_usd"])
    return caching


def _over_runs(values: list[float], level: float) -> Estimate:
    """The mean of one value per run with its percentile bootstrap interval (runs resampled)."""
    low, high = bootstrap_mean(values, level)
    return Estimate(sum(values) / len(values), low, high, len(values), level)


@dataclass
class Row:
    """One number of the analysis, as the CSV holds it."""

    group: str
    metric: str
    value: float | None
    low: float | None = None
    high: float | None = None
    n: int | None = None
    note: str = ""

    @classmethod
    def of(cls, group: str, metric: str, e: Estimate, note: str = "") -> Row:
        return cls(group, metric, e.mean, e.low, e.high, e.n, note)


def _fmt(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def _band(e: Estimate | None, signed: bool = False) -> str:
    if e is None:
        return "—"
    return _fmt(e.mean, signed) + (f" [{e.low:.3f}, {e.high:.3f}]" if e.n > 1 else "")


class Analysis:
    def __init__(self, groups: list[Group], ks: list[int], level: float = 0.95) -> None:
        self.groups, self.ks, self.level = groups, ks, level
        self.rows: list[Row] = []
        self.md: list[str] = []
        self.bands: dict[str, list[Estimate]] = {}

    def run(self) -> Analysis:
        self._header()
        self._groups()
        self._runs()
        self._spend()
        self._between()
        return self

    def _header(self) -> None:
        self.md += [f"# Analysis of {len(self.groups)} group(s)", "",
                    "imp@k: the best selection score reached by generation k minus the initial node's. Selection "
                    "scores are val where a domain has one, else train (mean over the run's domains); test is "
                    "read only from a run's final test. Intervals: "
                    f"{self.level:.0%} percentile bootstrap over runs.", ""]

    def imps(self, group: Group, k: int) -> list[float]:
        return [r.imp(k) for r in group.runs]

    def _groups(self) -> None:
        heads = ["group", "runs", "generations", "initial", "best", *[f"imp@{k}" for k in self.ks], "test of best"]
        self.md += ["## Groups", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for g in self.groups:
            last = max(r.generations for r in g.runs)
            self.bands[g.name] = bootstrap_band([r.curve(last) for r in g.runs], self.level)
            for generation, e in enumerate(self.bands[g.name]):
                self.rows.append(Row.of(g.name, f"best_so_far@{generation}", e))
            initial = _over_runs([r.curve(0)[0] for r in g.runs], self.level)
            best = _over_runs([_scored(r.score(r.best()), f"{r.path}: its best node") for r in g.runs], self.level)
            self.rows += [Row(g.name, "runs", len(g.runs)), Row.of(g.name, "initial", initial),
                          Row.of(g.name, "best", best)]
            cells = [g.name, str(len(g.runs)), str(last), _band(initial), _band(best)]
            for k in self.ks:
                short = sum(r.generations < k for r in g.runs)
                note = f"{short} of {len(g.runs)} runs stopped before generation {k}" if short else ""
                e = _over_runs(self.imps(g, k), self.level)
                self.rows.append(Row.of(g.name, f"imp@{k}", e, note))
                cells.append(_band(e, signed=True) + (f" ({short} short)" if short else ""))
            tests = [self._test_of_best(r) for r in g.runs]
            known = [t for t in tests if t is not None]
            test = _over_runs(known, self.level) if known else None
            if test is not None:
                self.rows.append(Row.of(g.name, "test_of_best", test, f"{len(known)} of {len(g.runs)} runs tested"))
            cells.append(_band(test) + (f" ({len(known)} of {len(g.runs)} tested)" if 0 < len(known) < len(g.runs)
                                        else ""))
            self.md.append("| " + " | ".join(cells) + " |")
        self.md.append("")

    @staticmethod
    def _test_of_best(run: Run) -> float | None:
        tests = run.test_scores()
        return tests[1].get(tests[0]) if tests else None

    def _runs(self) -> None:
        self.md += ["## Runs", "", "| group | run | seed | generations | initial | best node | best | test of best |",
                    "|---|---|---|---|---|---|---|---|"]
        for g in self.groups:
            for r in g.runs:
                best, tests = r.best(), r.test_scores()
                if tests is None:
                    test = f"not evaluated: python -m run_optimization --resume_from {r.path} --final_test"
                else:
                    chosen, means = tests
                    test = f"{_fmt(means.get(chosen))} (node {chosen}; initial {_fmt(means.get('initial'))})"
                self.md.append(f"| {g.name} | {r.name} | {r.seed} | {r.generations} | {_fmt(r.curve(0)[0])} | "
                               f"{best.node_id} | {best.scores_text()} | {test} |")
        self.md.append("")

    def _spend(self) -> None:
        self.md += ["## Cost and tokens per role (mean over runs)", "",
                    "Cached tokens: prompt tokens read from a provider's prompt cache (part of the tokens), billed "
                    "at its cached rate; saved: what that saved against the input price.", "",
                    "| group | role | $ | tokens | cached tokens | $ saved by caching |", "|---|---|---|---|---|---|"]
        for g in self.groups:
            spends = [r.spend() for r in g.runs]
            cachings = [_caching(r) for r in g.runs]
            n = len(spends)
            for role in sorted({role for s in spends for role in s}):
                usd = sum(s.get(role, (0.0, 0))[0] for s in spends) / n
                tokens = sum(s.get(role, (0.0, 0))[1] for s in spends) / n
                cached = sum(c.get(role, (0, 0.0))[0] for c in cachings) / n
                saved = sum(c.get(role, (0, 0.0))[1] for c in cachings) / n
                self.rows += [Row(g.name, f"cost_usd:{role}", usd, n=n), Row(g.name, f"tokens:{role}", tokens, n=n),
                              Row(g.name, f"cached_tokens:{role}", cached, n=n),
                              Row(g.name, f"cache_saved_usd:{role}", saved, n=n)]
                self.md.append(f"| {g.name} | {role} | {usd:.4f} | {tokens:,.0f} | {cached:,.0f} | {saved:.4f} |")
        self.md.append("")

    def _between(self) -> None:
        pairs = [(a, b) for i, a in enumerate(self.groups) for b in self.groups[i + 1:]]
        if not pairs:
            return
        self.md += ["## Between groups", "", "| groups | measure | difference | p | test |", "|---|---|---|---|---|"]
        for a, b in pairs:
            name = f"{a.name} vs {b.name}"
            for k in self.ks:
                diff, p, test = self.compare_imp(a, b, k)
                self.rows.append(Row(name, f"p:imp@{k}", p, n=len(a.runs) + len(b.runs), note=test))
                self.rows.append(Row(name, f"diff:imp@{k}", diff))
                self.md.append(f"| {name} | imp@{k} | {diff:+.3f} | {p:.4f} | {test} |")
            if len(a.runs) == len(b.runs) == 1:
                for split, (diff, p, rows) in self.compare_rows(a.runs[0], b.runs[0]).items():
                    test = f"exact paired test on the {rows} rows both best nodes answered"
                    self.rows += [Row(name, f"p:rows:{split}", p, n=rows, note=test),
                                  Row(name, f"diff:rows:{split}", diff, n=rows)]
                    self.md.append(f"| {name} | best nodes, {split} | {diff:+.3f} | {p:.4f} | {test} |")
        self.md.append("")

    def compare_imp(self, a: Group, b: Group, k: int) -> tuple[float, float, str]:
        """Mean imp@k of a minus b, the two-sided p-value, and the test that gave it."""
        x, y = self.imps(a, k), self.imps(b, k)
        diff = sum(x) / len(x) - sum(y) / len(y)
        seeds_a, seeds_b = [r.seed for r in a.runs], [r.seed for r in b.runs]
        known_a, known_b = [s for s in seeds_a if s is not None], [s for s in seeds_b if s is not None]
        if (len(known_a) == len(seeds_a) and len(known_b) == len(seeds_b) and sorted(known_a) == sorted(known_b)
                and len(set(known_a)) == len(known_a)):
            by_seed = dict(zip(seeds_b, y))
            paired = [by_seed[s] for s in seeds_a]
            return diff, paired_p(x, paired, "two-sided"), f"paired sign-flip test on {len(x)} seeds"
        return diff, permutation_p(x, y, "two-sided"), f"permutation test, {len(x)} and {len(y)} runs"

    @staticmethod
    def compare_rows(a: Run, b: Run) -> dict[str, tuple[float, float, int]]:
        """Per domain and split both best nodes were scored on: mean difference, p, shared rows."""
        rows_a, rows_b = a.rows_of(a.best()), b.rows_of(b.best())
        found = {}
        for split in rows_a.keys() & rows_b.keys():
            shared = sorted(rows_a[split].keys() & rows_b[split].keys())
            if shared:
                x, y = [rows_a[split][q] for q in shared], [rows_b[split][q] for q in shared]
                found[split] = ((sum(x) - sum(y)) / len(shared), paired_p(x, y, "two-sided"), len(shared))
        return found

    def markdown(self) -> str:
        return "\n".join(self.md) + "\n"

    def csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["group", "metric", "value", "low", "high", "n", "note"])
        for r in self.rows:  # names come from folders and records: no cell may run as a spreadsheet formula
            writer.writerow([csv_cell(r.group), csv_cell(r.metric),
                             *("" if v is None else round(v, 6) for v in (r.value, r.low, r.high)),
                             "" if r.n is None else r.n, csv_cell(r.note)])
        return out.getvalue()

    def png(self) -> bytes:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        fig, ax = plt.subplots(figsize=(7, 4))
        for name, band in self.bands.items():
            x = list(range(len(band)))
            ax.plot(x, [e.mean for e in band], marker="." if len(x) < 30 else None, label=name)
            ax.fill_between(x, [e.low for e in band], [e.high for e in band], alpha=0.2)
        ax.set(xlabel="generation", ylabel="best selection score so far",
               title=f"Progress (mean over runs, {self.level:.0%} band)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        out = io.BytesIO()
        fig.savefig(out, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        return out.getvalue()


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise UserError(f"--k {text!r}: expected generations as positive whole numbers, e.g. 10,50")
    return ks


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m apps.analyze", description=(__doc__ or "").split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", metavar="RUN_OR_GROUP", help="a run folder, or a folder of runs")
    ap.add_argument("--label", action="append", default=[], metavar="NAME=PATH[,NAME=PATH...]",
                    help="a group named NAME; the same NAME for several paths makes one group of their runs")
    ap.add_argument("--k", default=DEFAULT_K, help=f"generations to measure imp@k at (default {DEFAULT_K})")
    ap.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    ap.add_argument("--out", default=None, help="folder for analysis.md, analysis.csv and progress.png (default: "
                                                "analysis/ in the folder that holds the runs; never inside a run)")
    return ap


def _scored(value: float | None, what: str) -> float:
    if value is None:
        raise UserError(f"{what} has no score")
    return value


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not 0 < args.level < 1:
        raise UserError(f"--level {args.level}: expected a confidence level between 0 and 1, e.g. 0.95")
    ks = _ks(args.k)
    groups = load_groups(args.paths, args.label)
    # By default beside the runs (a group's folder, or the outputs folder of a run), not in the
    # current folder, which may be a checkout of this repository.
    holder = os.path.commonpath([str(r.path.resolve().parent) for g in groups for r in g.runs])
    out = Path(args.out).resolve() if args.out is not None else Path(holder) / "analysis"
    for g in groups:
        for r in g.runs:
            if out == r.path or out.is_relative_to(r.path) or (out / "run.json").exists():
                raise UserError(f"--out {out} is inside the run {r.path if out.is_relative_to(r.path) else out}: "
                                "analysis never writes in a run")
    analysis = Analysis(groups, ks, args.level).run()
    if args.out is None:  # below the handed folder: no link planted there (analysis -> ~/) is written through
        guard_folder(holder)
    make_folder(out)
    atomic_write_text(out / "analysis.md", analysis.markdown())
    atomic_write_text(out / "analysis.csv", analysis.csv())
    atomic_write_bytes(out / "progress.png", analysis.png())
    for line in [*analysis.markdown().splitlines(), f"saved: {out / 'analysis.md'}, analysis.csv, progress.png"]:
        print(console(line))


if __name__ == "__main__":
    exit_on_user_error(main)

