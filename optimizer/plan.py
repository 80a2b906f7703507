"""What a run prints about itself: its plan before it starts (and, with --dry_run, instead of
starting), and its summary when it stops. Text only: nothing here starts or changes a run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from archive.run_state import read_state, state_text
from optimizer.initial_agents import plan_text
from services.config import Config, LoopConfig
from services.departures import dry_run_lines
from services.render import console

if TYPE_CHECKING:
    from domains.base import Domain, Stage
    from optimizer.loop import Loop
    from services.ledger import Totals


def promotion_text(domain: Domain, stage: Stage, loop: LoopConfig) -> str:
    """When a stage lets a child on, for the plan."""
    rule = stage.rule or loop.promotion
    above = f"{domain.score_key} > {stage.above:g}"
    if rule == "score_above":
        return above
    if rule == "not_worse_than_parent":
        return f"{above} and not worse than its parent at level {loop.promotion_level:g}, {loop.promotion_test} test"
    return f"{above} and its mean reaches the best node's 95% lower bound (sica)"


def meta_model_record(run_dir: Path, config: Config, domains: list[str]) -> str:
    """What the meta model bandit has seen so far in a resumed run: each model's generations, children
    that gained on their parent, mean gain per dollar and cost, scored as the run's readers score."""
    from archive.bandit import arms, pulls_of
    from archive.store import Archive, observed_rule, observed_score, observed_sizes

    nodes = {n.node_id: n for n in Archive(run_dir).ordered()}
    sizes = observed_sizes(domains, list(nodes.values()))
    rule = observed_rule(config.to_dict()["loop"], domains)
    found = arms(config.meta_models(), pulls_of(nodes, lambda n: observed_score(n, sizes, rule)))
    return "; ".join(f"{a.model} {a.pulls} generations ({a.improved} gained, {a.mean_reward:.3g} per $, "
                     f"${a.cost_usd:.2f})" for a in found)


def plan_lines(run_dir: Path, domains: list[Domain], config: Config, backend: str, resumed: bool,
               why_models: str | None = None, why_backend: str | None = None,
               initial_from: dict | None = None, name: str = "", tags: Sequence[str] = ()) -> list[str]:
    """The plan, a line each, every line through `console`: what it quotes (the run folder's name, a
    resumed run's config from its run.json, a spec's domain and file names, --set values) may come
    from someone else's folder."""
    from optimizer.evaluation import split_rows

    lines = [f"run      {run_dir} ({f'resumed; it was {state_text(*read_state(run_dir))}' if resumed else 'new'})"]
    if resumed and len(config.meta_models()) > 1:
        lines.append(f"bandit   {meta_model_record(run_dir, config, [d.name for d in domains])}")
    if label := label_text(name, tags):
        lines.append(f"name     {label}")
    for d in domains:
        full = [f"{s} {split_rows(d, s, config.loop.eval_samples)}" for s in d.full_splits()]
        rows_of = "train + val" if config.loop.stage_splits == "train_and_val" and "val" in d.splits else "train"
        staged = "".join(f"staged {s.rows} {rows_of} rows (on if {promotion_text(d, s, config.loop)}), then "
                         for s in d.screening(config.loop))
        lines.append(f"domain   {d.name}: {staged}{' + '.join(full)} (score: {d.score_key})")
        if d.score_note:
            lines.append(f"         {d.score_key} is {d.score_note}")
    lines += [line for d in domains if (line := d.scorer.plan_line(d, config))]
    loop = config.loop
    source = initial_from and f"node {initial_from['node']} of {initial_from['run']}"
    agent = (f"all of {source}" if initial_from and initial_from["keep"] == "all" else
             f"meta agent of {source}, task agent {loop.initial_agent}" if initial_from else
             plan_text(loop.initial_agent, loop.initial_meta_agent))
    lines += [f"agent    {agent}",
              f"models   task {config.resolve_model('task')}, meta " + (
                  f"{config.resolve_model('meta')}" if len(config.meta_models()) == 1 else
                  f"one of {', '.join(config.meta_models())} each generation ({config.loop.meta_bandit} bandit, "
                  "rewarded by score gained per dollar)"),
              *([f"         chosen because {why_models}; override with --task_model/--meta_model"]
                if why_models else []),
              f"sandbox  {backend}" + (f" ({why_backend})" if why_backend else ""),
              "budget   " + (f"${config.gateway.budget_usd:g}" if config.gateway.budget_usd is not None else "none"),
              f"loop     {count(loop.max_generation, 'generation')}, parent selection {loop.parent_selection}"
              + (f", seed {loop.seed}" if loop.seed is not None else "")
              + (f", {loop.parallel} in flight" + ("" if loop.replayable else " (not replayable)")
                 if loop.parallel > 1 else "")
              + (f", baseline {loop.run_baseline}" if loop.run_baseline else "")]
    return [console(line) for line in lines]  # a resumed run's config, a spec's names: a folder's text


def count(n: int, thing: str) -> str:
    """`n` things, in the plural unless one."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


def label_text(name: str, tags: Sequence[str]) -> str:
    """A run's name and tags in one line ("" when it has neither); both were checked printable when
    the run took them, and go through `console` all the same since run.json can be edited."""
    shown = [console(name)] if name else []
    return ", ".join(shown + ([f"tags {', '.join(console(t) for t in tags)}"] if tags else []))


def caching_text(spent: Totals) -> str:
    """What providers' prompt caches did for a run's calls (services.ledger.Totals), after its cost."""
    return (f"; prompt caching: {spent.cached_tokens:,} prompt tokens read from the providers' caches, "
            f"{spent.cache_write_tokens:,} written, ${spent.cache_saved_usd:.4f} saved")


def summary_lines(loop: Loop, name: str = "", tags: Sequence[str] = ()) -> list[str]:
    nodes = loop.archive.ordered()
    counts = Counter(n.status for n in nodes)
    spent = loop.gateway.spent()
    label = label_text(name, tags)
    lines = [f"run {state_text(*read_state(loop.run_dir))}" + (f" ({label})" if label else ""),
             f"{len(nodes)} nodes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
             f"cost ${spent.cost_usd:.4f} in {spent.calls} model calls ({spent.cache_hits} replayed)"
             + (caching_text(spent) if spent.cached_tokens or spent.cache_write_tokens else "")]
    best = loop.best()
    if best:
        how = {"paired": f", chosen by paired tests at level {loop.config.loop.best_level:g}",
               "heldout": ", its held-out grade not below an earlier best's"}.get(loop.config.loop.best_choice, "")
        lines.append(f"best node {best.node_id} (generation {best.generation}{how}): {best.scores_text()}")
    lines.append(f"report: {loop.run_dir / 'report.html'}")
    return [console(line) for line in lines]


def print_dry_run(run_dir: Path, domains: list[Domain], config: Config, initial_from: dict | None,
                  replicates: int | None, name: str = "", tags: Sequence[str] = ()) -> None:
    """--dry_run: the plan and the cost estimate (of each replicate and of the group), with no folder made
    and no call."""
    from optimizer.estimate import estimate
    from optimizer.evaluation import split_rows
    from services.sandbox import choose_backend_why
    from services.startup import choose_run_models

    backend, why_backend = choose_backend_why(config.sandbox, dry_run=True)
    why_models = choose_run_models(config)  # the models `auto` resolves to here, as the run would (no call)
    costs = estimate(domains, config, lambda d, split: split_rows(d, split, config.loop.eval_samples))
    lines = plan_lines(run_dir, domains, config, backend, (run_dir / "run.json").exists(), why_models, why_backend,
                       initial_from, name, tags) + [costs.line()]
    lines += [console(line) for line in dry_run_lines(config, [d.name for d in domains])]
    if replicates:
        seed = config.loop.seed or 0
        lines.append(f"group    {replicates} replicates, seeds {seed} to {seed + replicates - 1}, each run as above: "
                     f"~${replicates * costs.run_usd:.2f} in all")
    print("\n".join(lines + ["dry run: nothing started"]))
