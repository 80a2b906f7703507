"""What a run prints about itself: its plan before it starts (and, with --dry_run, instead of
starting), and its summary when it stops. Text only: nothing here starts or changes a run."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, cast

from archive.promotion import Promotion, RowScores, best_rule, row_scores
from archive.run_state import read_state, state_text
from optimizer.initial_agents import plan_text
from search.registry import promotion_rule
from search.stats import bootstrap_mean
from services.choices import StageSplits
from services.config import Config, LoopConfig
from services.departures import dry_run_lines
from services.errors import UserError
from services.local_model import is_local
from services.render import console

if TYPE_CHECKING:
    from archive.eval_store import EvalStore
    from archive.records import Node
    from domains.base import Domain, Stage
    from optimizer.estimate import Estimate
    from optimizer.loop import Loop
    from services.ledger import Totals


RESAMPLES = 2000  # bootstrap draws of the closing line's unpaired interval


def promotion_text(domain: Domain, stage: Stage, loop: LoopConfig) -> str:
    """When a stage lets a child on, for the plan."""
    rule = Promotion(stage.rule or loop.promotion)
    return promotion_rule(rule.rule).plan(f"{domain.score_key} > {stage.above:g}", rule)


def racing_text(domain: Domain, domains: list[Domain], config: Config) -> str:
    """What loop.racing does to a domain's full evaluation (one of the run's `domains`), for the plan."""
    loop, split = config.loop, domain.selection_split
    scored_by_model = [d.name for d in domains if d.scorer.models(config)]
    if scored_by_model:  # optimizer.racing.Racer.races: a race runs on all the run's domains or on none
        return (f"racing off: scoring {scored_by_model[0]} calls a model, and each look would pay for all its "
                "rows' scoring again")
    return (f"racing: {split} in chunks of {loop.racing_chunk} rows, stopped once the child can reach neither the "
            f"best node nor its promotion bar (error {loop.racing_alpha:g}); the rest only for one that finishes")


def meta_model_record(run_dir: Path, config: Config, domains: list[str]) -> str:
    """What the meta model bandit has seen so far in a resumed run: each model's generations, children
    that gained on their parent, mean gain per dollar and cost, scored as the run's readers score."""
    from archive.store import Archive, observed_rule, observed_score, observed_sizes
    from search.meta_model_choice import arms, pulls_of

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
        both = config.loop.stage_splits == StageSplits.TRAIN_AND_VAL and "val" in d.splits
        rows_of = "train + val" if both else "train"
        staged = "".join(f"staged {s.rows} {rows_of} rows (on if {promotion_text(d, s, config.loop)}), then "
                         for s in d.screening(config.loop))
        lines.append(f"domain   {d.name}: {staged}{' + '.join(full)} (score: {d.score_key})")
        if config.loop.racing:
            lines.append(f"         {racing_text(d, domains, config)}")
        if d.score_note:
            lines.append(f"         {d.score_key} is {d.score_note}")
    lines += [line for d in domains if (line := d.scorer.plan_line(d, config))]
    loop = config.loop
    source = initial_from and f"node {initial_from['node']} of {initial_from['run']}"
    agent = (f"all of {source}" if initial_from and initial_from["keep"] == "all" else
             f"meta agent of {source}, task agent {loop.initial_agent}" if initial_from else
             plan_text(loop.initial_agent, loop.initial_meta_agent, config.resolve_model('meta')))
    lines += [f"agent    {agent}", f"meta     {meta_agent_text(config.models.meta_agent)}",
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
              + (f", baseline {loop.run_baseline}" if loop.run_baseline else "")
              + (f", time limit {loop.max_minutes:g} min from this command's start" if loop.max_minutes else ""),
              *([f"search   {settings_text(config.search)}"] if config.search else [])]
    lines += left_over(run_dir, loop.max_generation) if resumed else []
    return [console(line) for line in lines]  # a resumed run's config, a spec's names: a folder's text


def settings_text(search: dict) -> str:
    """The strategies' own settings the config gives (`search`), in one line: `paired: level 0.01; ...`."""
    return "; ".join(f"{name}: " + ", ".join(f"{key} {value}" for key, value in sorted(values.items()))
                     for name, values in sorted(search.items()) if isinstance(values, dict))


def meta_agent_text(name: str) -> str:
    """What edits the code each generation (models.meta_agent), in words."""
    from services.coding_agents import coding_agent, is_coding_agent

    if not is_coding_agent(name):
        return f"{name}: the workspace's own MetaAgent, run by inside/run_meta.py"
    from optimizer.agent_launch import files_of

    agent = coding_agent(name)
    return (f"{name}: {agent.about}, in the sandbox; its prompt and settings are agent code "
            f"({files_of(agent)}/), its calls the meta session's")


def count(n: int, thing: str) -> str:
    """`n` things, in the plural unless one."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


def left_over(run_dir: Path, max_generation: int) -> list[str]:
    """A line for generations a kill left in flight that a resume's lower --max_generation does not redo."""
    from archive.store import Archive

    beyond = [s.node_id for s in Archive(run_dir).pending_generations() if s.generation > max_generation]
    if not beyond:
        return []
    return [f"         {count(len(beyond), 'generation')} in flight when the run stopped ({', '.join(beyond)}) "
            f"{'is' if len(beyond) == 1 else 'are'} past --max_generation {max_generation}: left as started, for a "
            "resume with a higher --max_generation"]


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
    spent = loop.ctx.gateway.spent()
    label = label_text(name, tags)
    lines = [f"run {state_text(*read_state(loop.ctx.run_dir))}" + (f" ({label})" if label else ""),
             f"{len(nodes)} nodes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
             f"cost ${spent.cost_usd:.4f} in {spent.calls} model calls ({spent.cache_hits} answered from the response "
             "cache)"
             + (caching_text(spent) if spent.cache_saved_usd or spent.cache_write_tokens else "")]
    best = loop.best()
    if best:
        choice = loop.ctx.best_choice
        how = f", {note}" if (note := best_rule(choice).note(choice)) else ""
        lines.append(f"best node {best.node_id} (generation {best.generation}{how}): {best.scores_text()}")
    initial = loop.archive.nodes.get("initial")
    if best and initial:
        lines += [gain_line(d, best, initial, loop.evaluator.store) for d in loop.ctx.domains]
    lines.append(generations_line(nodes, loop.ctx.config.loop.max_generation))
    if (note := no_edit_note(nodes, loop.ctx.config)) is not None:
        lines.append(note)
    lines.append(f"report: {loop.ctx.run_dir / 'report.html'}")
    return [console(line) for line in lines]


def gain_line(domain: Domain, best: Node, initial: Node, store: EvalStore) -> str:
    """The best node against the initial one on the domain's selection split: both scores, the difference and its
    95% interval (`difference`)."""
    split = domain.selection_split
    head = f"best vs initial on {domain.name}/{split}: "
    scores = [n.scores.get(domain.name, {}).get(split) for n in (best, initial)]
    if None in scores:
        return head + "not both scored on it"
    if best is initial:
        return head + f"the best node is the initial node ({scores[0]:.3f}), no gain"
    rows = [evaluated_rows(n, domain, store) for n in (best, initial)]
    bands = [n.intervals.get(domain.name, {}).get(split) for n in (best, initial)]
    mine, theirs = cast("tuple[float, float]", scores)
    gain, low, high, how = difference(rows[0], rows[1], mine, theirs, bands[0], bands[1])
    band = f" [{low:+.3f}, {high:+.3f}] (95%, {how})" if low is not None else f" ({how})"
    return head + f"node {best.node_id} {scores[0]:.3f} vs initial {scores[1]:.3f}, difference {gain:+.3f}{band}"


def evaluated_rows(node: Node, domain: Domain, store: EvalStore) -> RowScores | None:
    """The node's per-row scores on the domain's selection split, from its full evaluation's report; None without."""
    key = node.eval_key(domain.name, domain.selection_split)
    if not (key and node.full_eval.get(domain.name)):
        return None
    try:
        report = store.report(key)
    except UserError:  # a garbled report: compared without its rows
        return None
    return row_scores(report, domain.score_key) if report else None


def difference(mine: RowScores | None, theirs: RowScores | None, score: float, their_score: float,
               band: list[float] | None = None, their_band: list[float] | None = None,
               ) -> tuple[float, float | None, float | None, str]:
    """mine - theirs, with a 95% interval and how it was made: paired over the rows both answered (the rows' own
    difficulty cancels out; the mean of the differences with its percentile bootstrap, search/stats.py), else
    unpaired: a bootstrap of each side's rows drawn apart, else the normal approximation from the two scores' own
    intervals, else none. Seeded: the same records give the same line."""
    shared = sorted(set(mine or {}) & set(theirs or {}))
    if mine and theirs and shared:
        gaps = [mine[q] - theirs[q] for q in shared]
        low, high = bootstrap_mean(gaps)
        return sum(gaps) / len(gaps), low, high, f"paired over {len(shared)} shared rows"
    if mine and theirs:
        rng, a, b = random.Random(0), list(mine.values()), list(theirs.values())
        draws = sorted(sum(rng.choices(a, k=len(a))) / len(a) - sum(rng.choices(b, k=len(b))) / len(b)
                       for _ in range(RESAMPLES))
        low, high = draws[int(0.025 * RESAMPLES)], draws[int(0.975 * RESAMPLES) - 1]
        return score - their_score, low, high, "unpaired: no rows shared"
    if band and their_band:
        z = NormalDist().inv_cdf(0.975)
        half = z * math.hypot((band[1] - band[0]) / (2 * z), (their_band[1] - their_band[0]) / (2 * z))
        return score - their_score, score - their_score - half, score - their_score + half, \
            "unpaired, from the two scores' intervals: no per-row results"
    return score - their_score, None, None, "no interval: no per-row results"


def generations_line(nodes: list[Node], max_generation: int) -> str:
    """How many generations the run has done, and their mean wall time (the initial node's apart)."""
    done = [n for n in nodes if n.generation > 0]
    times = [n.seconds["total"] for n in done if "total" in n.seconds]
    first = next((n.seconds.get("total") for n in nodes if n.generation == 0), None)
    return (f"generations {len(done)} of {max_generation} done"
            + (f", {duration(sum(times) / len(times))} each on average" if times else "")
            + (f" (the initial node's evaluation {duration(first)})" if first is not None else ""))


def no_edit_note(nodes: list[Node], config: Config) -> str | None:
    """Why no child was scored, when every child's meta agent, on the bundled local model, changed nothing."""
    children = [n for n in nodes if n.generation > 0]
    if not children or any(n.status != "no_change" for n in children) or not all(
            is_local(m) for m in config.meta_models()):
        return None
    return ("no child: the bundled local model, as meta model, made no edit (it is too small to drive the meta "
            "agent's tools); python -m run_optimization --preset demo shows the loop with edits replayed from a "
            "script, and a provider key (docs/models.md) runs a real meta agent")


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class RunPlan:
    """What a run would do, before anything is made or called: its plan's lines as the command prints them
    (folder, domains, agents, models, sandbox, loop, time and cost estimate, departures from the paper), the
    estimate itself and the sandbox backend it would use. `python -m run_optimization --dry_run` prints it,
    `hyperagents.plan` returns it."""

    run_dir: Path
    lines: tuple[str, ...]
    estimate: Estimate
    backend: str

    def text(self) -> str:
        return "\n".join([*self.lines, "dry run: nothing started"])


def dry_run_plan(run_dir: Path, domains: list[Domain], config: Config, initial_from: dict | None,
                 replicates: int | None, name: str = "", tags: Sequence[str] = ()) -> RunPlan:
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
    return RunPlan(run_dir, tuple(lines), costs, backend)

