"""What a run will cost, roughly, before it starts: shown in the plan, and checked against the budget.

Tokens are estimated from the data (characters / 4 for the prompt of a row) and fixed
allowances for what models write; prices are the gateway's (the config's `gateway.prices`,
else litellm's table), 0 for local and unknown models. An estimate, not a quote: it is
there to catch a budget that cannot pay for even one generation.

The meta agent's conversation grows by a turn each call and is sent whole every time. Where
its provider caches prompts (Anthropic's models while `gateway.prompt_caching` is on; a
provider that caches by itself, OpenAI's, always), each call reads the history the call
before wrote at the cached read price, and writes only its own new turn. A task agent's row
prompt is estimated shorter than a provider caches (1,024 tokens), so evaluations are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optimizer.heldout import graded_domains, heldout_models
from services.gateway.caching import takes_marks
from services.gateway.pricing import pricing_of

if TYPE_CHECKING:
    from domains.base import Domain
    from services.config import Config, GatewayConfig

RowsOf = Callable[["Domain", str], int]  # (domain, split) -> the rows its full evaluation runs on

CHARS_PER_TOKEN = 4
INSTRUCTION_TOKENS = 600  # the agent's own prompt around a row's inputs
COMPLETION_TOKENS = 1500  # a reply, reasoning included (o-series models think before answering)
META_PROMPT_TOKENS = 12000  # one meta agent call, averaged over a conversation whose history grows
META_FIRST_PROMPT_TOKENS = 3000  # its first call: the tool instructions and the task, before any turn
META_COMPLETION_TOKENS = 800


@dataclass
class Estimate:
    initial_usd: float  # the initial node's evaluation
    meta_usd: float  # one meta agent run, all its calls used
    evaluation_usd: float  # one child's staged and full evaluation
    generations: int
    final_test_usd: float = 0.0  # the test split, once, for the chosen node and the initial one (loop.final_test)
    caching_saves_usd: float = 0.0  # what prompt caching saves on one meta agent run (already taken off meta_usd)
    heldout_usd: float = 0.0  # held-out grading of a new best's proofs: the initial node's, at most each child's

    @property
    def generation_usd(self) -> float:
        return self.meta_usd + self.evaluation_usd + self.heldout_usd

    @property
    def run_usd(self) -> float:
        return self.initial_usd + self.heldout_usd + self.generations * self.generation_usd + self.final_test_usd

    def line(self) -> str:
        final = f", final test ~${self.final_test_usd:.2f}" if self.final_test_usd else ""
        heldout = f", held-out grading ~${self.heldout_usd:.2f} when the best changes" if self.heldout_usd else ""
        saved = (f"\n         prompt caching of the meta agent's history saves ~${self.caching_saves_usd:.2f} a "
                 f"generation (~${self.generations * self.caching_saves_usd:.2f} a run)"
                 if self.caching_saves_usd >= 0.005 else "")
        return (f"estimate ~${self.run_usd:.2f} for the run: initial evaluation ~${self.initial_usd:.2f}, "
                f"each generation up to ~${self.generation_usd:.2f} (meta agent ~${self.meta_usd:.2f}, "
                f"evaluation ~${self.evaluation_usd:.2f}{heldout}){final}{saved}")


def call_usd(model: str, prices: dict, prompt_tokens: float, completion_tokens: float) -> float:
    """One call's cost at `model`'s listed prices (services/gateway/pricing.py: the gateway's own rule)."""
    pricing = pricing_of(model, prices)
    return prompt_tokens * pricing.input_usd + completion_tokens * pricing.output_usd


def evaluation_usd(domains: list[Domain], config: Config, rows_of: RowsOf, test: bool = False) -> float:
    """One node's evaluation, staged and full, assuming it passes the first stage (`test`: its test
    split instead, as the final test runs it).

    `rows_of(domain, split)` is how many rows the full evaluation runs on that split.
    """
    total = 0.0
    for d in domains:
        row_tokens = _row_tokens(d)
        splits = ["test"] if test else d.full_splits()
        rows = sum(rows_of(d, s) for s in splits if s in d.splits)  # staged rows are reused
        total += rows * call_usd(config.resolve_model("task"), config.gateway.prices, row_tokens, COMPLETION_TOKENS)
        for model in d.scorer.models(config):
            total += rows * _graded_usd(model, config, row_tokens)
    return total


def _row_tokens(domain: Domain) -> float:
    """A row's prompt to the task agent: its instructions and the row's inputs (train rows' mean)."""
    df = domain.load("train")
    return INSTRUCTION_TOKENS + sum(df[c].astype(str).str.len().mean() for c in domain.inputs.values()) \
        / CHARS_PER_TOKEN


def _graded_usd(model: str, config: Config, row_tokens: float) -> float:
    """One row graded or judged by `model`: it reads the problem, reference, guidelines and the answer."""
    return call_usd(model, config.gateway.prices, 3 * row_tokens + COMPLETION_TOKENS, COMPLETION_TOKENS)


def heldout_usd(domains: list[Domain], config: Config, rows_of: RowsOf) -> float:
    """One node's proofs graded again by models.heldout_grader (optimizer/heldout.py): the selection split's
    rows of each domain graded by a grader model; 0 when there is none."""
    models = heldout_models(domains, config)
    graded = graded_domains(domains)
    return sum(rows_of(d, d.selection_split) * _graded_usd(model, config, _row_tokens(d))
               for model in models for d in domains if d.name in graded)


def meta_usd(model: str, gw: GatewayConfig, calls: int) -> tuple[float, float]:
    """One meta agent run of `calls` calls whose prompt grows evenly from META_FIRST_PROMPT_TOKENS and averages
    META_PROMPT_TOKENS: what it costs, and what prompt caching saves of that."""
    pricing = pricing_of(model, gw.prices)
    last = 2 * META_PROMPT_TOKENS - META_FIRST_PROMPT_TOKENS
    prompts = [META_FIRST_PROMPT_TOKENS + (last - META_FIRST_PROMPT_TOKENS) * k / max(calls - 1, 1)
               for k in range(calls)]
    output = calls * META_COMPLETION_TOKENS * pricing.output_usd
    full = sum(prompts) * pricing.input_usd + output
    caches = gw.prompt_caching if takes_marks(model) else pricing.cache_read_usd < pricing.input_usd
    if calls < 2 or not caches:
        return full, 0.0
    # Each prompt token is written once, when it is new; every later call reads it.
    cached = prompts[-1] * pricing.cache_write_usd + sum(prompts[:-1]) * pricing.cache_read_usd + output
    return min(full, cached), max(full - cached, 0.0)


def initial_rows(config: Config, rows_of: RowsOf) -> RowsOf:
    """The rows of each split the initial node is evaluated on: all of `rows_of`'s, or under
    loop.initial_eval stage only the first screening stage's (of val too with stage_splits train_and_val)."""
    if config.loop.initial_eval != "stage":
        return rows_of

    def staged(d: Domain, split: str) -> int:
        first = d.screening(config.loop)
        runs = split == "train" or (config.loop.stage_splits == "train_and_val" and split == "val")
        return min(first[0].rows, rows_of(d, split)) if first and runs else rows_of(d, split) if not first else 0

    return staged


def estimate(domains: list[Domain], config: Config, rows_of: RowsOf) -> Estimate:
    evaluation = evaluation_usd(domains, config, rows_of)
    initial = evaluation_usd(domains, config, initial_rows(config, rows_of))
    # With a bandit over several meta models, each generation is priced at the dearest: an upper bound.
    meta, saved = max(meta_usd(m, config.gateway, config.loop.meta_max_calls) for m in config.meta_models())
    final = 2 * evaluation_usd(domains, config, rows_of, test=True) if config.loop.final_test else 0.0
    return Estimate(initial, meta, evaluation, config.loop.max_generation, final, saved,
                    heldout_usd(domains, config, rows_of))
