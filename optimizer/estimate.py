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

Time is estimated the same way, from the same tokens and an assumed speed per call (the constants
below): rows run `harness.num_workers` at once on a provider, one at a time on the bundled local
model, whose one server does the work; a generation's meta agent uses all its calls. A coding agent as the meta
agent (`--meta_agent claude-code`, ...) makes its own typical number of calls, each larger (`meta_shape`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optimizer.feedback import TRY_ROWS
from optimizer.heldout import graded_domains, heldout_models
from optimizer.initial_agents import replays_demo
from services.choices import InitialEval, StageSplits
from services.gateway.caching import takes_marks
from services.gateway.pricing import pricing_of
from services.local_model import is_local

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

# The speed of a call, assumed: a provider's model reads the prompt in about API_FIRST_TOKEN_S and writes
# API_TOKENS_PER_S (hosted o4-mini, Claude Sonnet and Gemini Pro write 50-150 tokens/s, reasoning included).
API_FIRST_TOKEN_S = 2.0
API_TOKENS_PER_S = 60.0
# The bundled local model (local/smollm2-135m served with its default 1 thread on 2 cores, context 2048), measured
# with bench/local_model.py's requests (1,000-token prompts, 128-token stories): 127-142 prompt tokens and 61-66
# written tokens per CPU second of its server (on a shared machine, whose wall clock gave 40-62 and 20-26). A
# prompt is cut to gateway.local_context; under a JSON schema a task agent's answer is about LOCAL_ANSWER_TOKENS.
# The server reuses a prompt prefix it has cached (a task agent's instructions), so rows may go faster than this.
LOCAL_PROMPT_TOKENS_PER_S = 130.0
LOCAL_TOKENS_PER_S = 63.0
LOCAL_ANSWER_TOKENS = 20


@dataclass
class Estimate:
    initial_usd: float  # the initial node's evaluation
    meta_usd: float  # one meta agent run, all its calls used
    evaluation_usd: float  # one child's staged and full evaluation
    generations: int
    final_test_usd: float = 0.0  # the test split, once, for the chosen node and the initial one (loop.final_test)
    caching_saves_usd: float = 0.0  # what prompt caching saves on one meta agent run (already taken off meta_usd)
    heldout_usd: float = 0.0  # held-out grading of a new best's proofs: the initial node's, at most each child's
    timing: Timing | None = None  # the run's wall clock, at the speeds assumed above

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
                f"evaluation ~${self.evaluation_usd:.2f}{heldout}){final}{saved}"
                + (f"\n{self.timing.line()}" if self.timing else ""))


@dataclass
class Timing:
    """The run's wall clock by the assumed speeds above, in seconds."""

    initial_s: float  # the initial node's evaluation
    meta_s: float  # one meta agent run, all its calls used
    evaluation_s: float  # one child's staged and full evaluation
    generations: int
    at_once: int  # generations that go faster together: loop.parallel on a provider, 1 on the local model
    final_test_s: float
    basis: str  # the assumption, in words

    @property
    def generation_s(self) -> float:
        return self.meta_s + self.evaluation_s

    @property
    def run_s(self) -> float:
        return self.initial_s + math.ceil(self.generations / self.at_once) * self.generation_s + self.final_test_s

    def line(self) -> str:
        final = f", final test {about(self.final_test_s)}" if self.final_test_s else ""
        together = f", {self.at_once} at once" if self.at_once > 1 else ""
        return (f"time     {about(self.run_s)} for the run: initial evaluation {about(self.initial_s)}, each "
                f"generation up to {about(self.generation_s)} (meta agent up to {about(self.meta_s)}, "
                f"evaluation {about(self.evaluation_s)}{together}){final}; assuming {self.basis}")


def minutes(seconds: float) -> str:
    """A duration as the plan writes it: "12 min", "<1 min", or "900 min (15 h)"."""
    if seconds < 30:
        return "<1 min" if seconds else "0 min"
    shown = f"{round(seconds / 60):,} min"
    return f"{shown} ({seconds / 3600:.1f} h)" if seconds >= 2 * 3600 else shown


def about(seconds: float) -> str:
    """`minutes`, marked as an estimate: "~12 min", or "<1 min"."""
    shown = minutes(seconds)
    return shown if shown.startswith(("<", "0 ")) else f"~{shown}"


def call_seconds(model: str, config: Config, prompt_tokens: float, completion_tokens: float) -> float:
    """One call's wall clock at the speeds assumed above."""
    if is_local(model):
        return min(prompt_tokens, config.gateway.local_context) / LOCAL_PROMPT_TOKENS_PER_S \
            + completion_tokens / LOCAL_TOKENS_PER_S
    return API_FIRST_TOKEN_S + completion_tokens / API_TOKENS_PER_S


def row_seconds(model: str, config: Config, prompt_tokens: float) -> float:
    """One row's call (a task agent's answer, or a grade of it): on the local model, an answer under a schema."""
    return call_seconds(model, config, prompt_tokens, LOCAL_ANSWER_TOKENS if is_local(model) else COMPLETION_TOKENS)


def speed_basis(models: list[str]) -> str:
    """The assumption of call_seconds for `models`, in words."""
    said = [f"{API_TOKENS_PER_S:g} tokens/s written by a provider's model after {API_FIRST_TOKEN_S:g} s"] if any(
        not is_local(m) for m in models) else []
    if any(is_local(m) for m in models):
        said.append(f"the local model reading {LOCAL_PROMPT_TOKENS_PER_S:g} and writing {LOCAL_TOKENS_PER_S:g} "
                    "tokens/s, one call at a time (measured on 2 cores)")
    return "; ".join(said)


def evaluation_s(domains: list[Domain], config: Config, rows_of: RowsOf, test: bool = False) -> float:
    """One node's evaluation, staged and full, as `evaluation_usd` counts it, in seconds: its rows `harness.num_workers`
    at once (at most gateway.max_concurrent_calls), one at a time on the local model."""
    task = config.resolve_model("task")
    workers = min(config.harness.num_workers, config.gateway.max_concurrent_calls or config.harness.num_workers)
    total = 0.0
    for d in domains:
        row_tokens = _row_tokens(d)
        rows = sum(rows_of(d, s) for s in (["test"] if test else d.full_splits()) if s in d.splits)
        row_s = row_seconds(task, config, row_tokens) + sum(
            row_seconds(m, config, 3 * row_tokens + COMPLETION_TOKENS) for m in d.scorer.models(config))
        at_once = 1 if is_local(task) else workers
        total += math.ceil(rows / at_once) * row_s
    return total


def timing(domains: list[Domain], config: Config, rows_of: RowsOf) -> Timing:
    """The run's time at the assumed speeds: as `estimate`, with each meta agent run using all its calls."""
    calls, average, _ = meta_shape(config)
    meta = max(calls * call_seconds(m, config, average, META_COMPLETION_TOKENS) for m in config.meta_models())
    if replays_demo(config):  # no model call: the try command's rows are the meta agent's time
        meta = sum(TRY_ROWS * row_seconds(config.resolve_model("task"), config, _row_tokens(d)) for d in domains)
    models = [config.resolve_model("task"), *config.meta_models(),
              *(model for d in domains for model in d.scorer.models(config))]
    final = 2 * evaluation_s(domains, config, rows_of, test=True) if config.loop.final_test else 0.0
    return Timing(evaluation_s(domains, config, initial_rows(config, rows_of)), meta,
                  evaluation_s(domains, config, rows_of), config.loop.max_generation,
                  1 if any(is_local(m) for m in models) else config.loop.parallel, final, speed_basis(models))


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


def meta_usd(model: str, gw: GatewayConfig, calls: int, average: int = META_PROMPT_TOKENS,
             first: int = META_FIRST_PROMPT_TOKENS) -> tuple[float, float]:
    """One meta agent run of `calls` calls whose prompt grows evenly from `first` tokens and averages `average`:
    what it costs, and what prompt caching saves of that."""
    pricing = pricing_of(model, gw.prices)
    last = 2 * average - first
    prompts = [first + (last - first) * k / max(calls - 1, 1) for k in range(calls)]
    output = calls * META_COMPLETION_TOKENS * pricing.output_usd
    full = sum(prompts) * pricing.input_usd + output
    caches = gw.prompt_caching if takes_marks(model) else pricing.cache_read_usd < pricing.input_usd
    if calls < 2 or not caches:
        return full, 0.0
    # Each prompt token is written once, when it is new; every later call reads it.
    cached = prompts[-1] * pricing.cache_write_usd + sum(prompts[:-1]) * pricing.cache_read_usd + output
    return min(full, cached), max(full - cached, 0.0)


def meta_shape(config: Config) -> tuple[int, int, int]:
    """(calls, average prompt tokens, first prompt tokens) of one meta agent run: the built-in agent uses its
    whole call cap; a coding agent its own typical calls (at most the cap), each about its `call_tokens` (its
    system prompt and tool definitions alone are thousands of tokens, resent every turn), the first about half."""
    from services.coding_agents import coding_agent, is_coding_agent

    cap = config.loop.meta_max_calls
    if not is_coding_agent(config.models.meta_agent):
        return cap, META_PROMPT_TOKENS, META_FIRST_PROMPT_TOKENS
    agent = coding_agent(config.models.meta_agent)
    return min(agent.calls, cap), agent.call_tokens, agent.call_tokens // 2


def initial_rows(config: Config, rows_of: RowsOf) -> RowsOf:
    """The rows of each split the initial node is evaluated on: all of `rows_of`'s, or under
    loop.initial_eval stage only the first screening stage's (of val too with stage_splits train_and_val)."""
    if config.loop.initial_eval != InitialEval.STAGE:
        return rows_of

    def staged(d: Domain, split: str) -> int:
        first = d.screening(config.loop)
        runs = split == "train" or (config.loop.stage_splits == StageSplits.TRAIN_AND_VAL and split == "val")
        return min(first[0].rows, rows_of(d, split)) if first and runs else rows_of(d, split) if not first else 0

    return staged


def estimate(domains: list[Domain], config: Config, rows_of: RowsOf) -> Estimate:
    evaluation = evaluation_usd(domains, config, rows_of)
    initial = evaluation_usd(domains, config, initial_rows(config, rows_of))
    # With a bandit over several meta models, each generation is priced at the dearest: an upper bound.
    calls, average, first = meta_shape(config)
    meta, saved = max(meta_usd(m, config.gateway, calls, average, first) for m in config.meta_models())
    final = 2 * evaluation_usd(domains, config, rows_of, test=True) if config.loop.final_test else 0.0
    return Estimate(initial, meta, evaluation, config.loop.max_generation, final, saved,
                    heldout_usd(domains, config, rows_of), timing(domains, config, rows_of))
