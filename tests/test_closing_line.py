"""The lines a run ends with (optimizer/plan.py summary_lines): the best node against the initial one on the
selection split, with the difference and its 95% interval, and the generations done with their mean time; and
the plan's estimate of the run's time (optimizer/estimate.py). The numbers are checked against the run's own
records and against a count by hand of the assumed speeds."""

import json
import math
import random

import pytest

from optimizer.estimate import (
    API_FIRST_TOKEN_S,
    API_TOKENS_PER_S,
    COMPLETION_TOKENS,
    LOCAL_ANSWER_TOKENS,
    LOCAL_PROMPT_TOKENS_PER_S,
    LOCAL_TOKENS_PER_S,
    META_COMPLETION_TOKENS,
    _row_tokens,
    estimate,
    minutes,
)
from optimizer.plan import RESAMPLES, difference, duration
from search.stats import bootstrap_mean
from support.cli import run_loop
from support.scripted_loop import IMPROVE, loop_config, nodes, responder


def test_the_difference_is_paired_over_the_shared_rows():
    best = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0, "x": 1.0}
    initial = {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0, "y": 0.0}
    gain, low, high, how = difference(best, initial, 0.8, 0.25)
    gaps = [1.0, 0.0, 0.0, 1.0]  # a, b, c, d: both answered them
    assert gain == pytest.approx(0.5) and (low, high) == bootstrap_mean(gaps)
    assert how == "paired over 4 shared rows"


def test_without_shared_rows_the_interval_is_unpaired():
    best, initial = {"a": 1.0, "b": 1.0, "c": 0.0}, {"x": 0.0, "y": 1.0}
    gain, low, high, how = difference(best, initial, 2 / 3, 0.5)
    rng = random.Random(0)
    draws = sorted(sum(rng.choices([1.0, 1.0, 0.0], k=3)) / 3 - sum(rng.choices([0.0, 1.0], k=2)) / 2
                   for _ in range(RESAMPLES))
    assert gain == pytest.approx(1 / 6) and (low, high) == (draws[50], draws[1949])
    assert how == "unpaired: no rows shared"


def test_without_rows_the_interval_comes_from_the_two_scores_intervals():
    gain, low, high, how = difference(None, {"a": 1.0}, 0.7, 0.5, [0.6, 0.8], [0.4, 0.6])
    half = math.hypot(0.1, 0.1)  # each interval is 2 z se wide: the difference's half width is z sqrt(se1² + se2²)
    assert gain == pytest.approx(0.2) and low == pytest.approx(0.2 - half) and high == pytest.approx(0.2 + half)
    assert how.startswith("unpaired, from the two scores' intervals")
    assert difference(None, None, 0.7, 0.5) == (pytest.approx(0.2), None, None, "no interval: no per-row results")


def test_durations_and_minutes_read_as_a_person_writes_them():
    assert [duration(s) for s in (41.26, 150, 9000)] == ["41.3 s", "2.5 min", "2.5 h"]
    assert [minutes(s) for s in (0, 20, 90, 3000, 9000)] == ["0 min", "<1 min", "2 min", "50 min", "150 min (2.5 h)"]


def _config(task: str, meta: str, **loop):
    from services.config import Config

    config = Config()
    config.models.task, config.models.meta = task, meta
    config.loop.eval_samples, config.loop.max_generation, config.loop.meta_max_calls = 20, 3, 10
    for key, value in loop.items():
        setattr(config.loop, key, value)
    return config


def test_the_time_estimate_is_the_rows_times_the_assumed_speed_of_a_call():
    from domains.registry import get_domain

    domains = [get_domain("imo_grading")]
    rows = lambda d, split: 20  # noqa: E731  (train 20 + val 20)
    api = estimate(domains, _config("openai/x", "openai/y"), rows).timing
    call = API_FIRST_TOKEN_S + COMPLETION_TOKENS / API_TOKENS_PER_S
    assert api.evaluation_s == pytest.approx(math.ceil(40 / 5) * call)  # 5 workers (harness.num_workers)
    assert api.meta_s == pytest.approx(10 * (API_FIRST_TOKEN_S + META_COMPLETION_TOKENS / API_TOKENS_PER_S))
    assert api.run_s == pytest.approx(api.initial_s + 3 * (api.meta_s + api.evaluation_s))
    assert api.line().startswith(f"time     ~{minutes(api.run_s)} for the run: ")
    assert "assuming 60 tokens/s written by a provider's model after 2 s" in api.line()
    # --parallel 2: generations two at a time on a provider
    assert estimate(domains, _config("openai/x", "openai/y", parallel=2), rows).timing.run_s == pytest.approx(
        api.initial_s + 2 * (api.meta_s + api.evaluation_s))

    local = estimate(domains, _config("local/smollm2-135m", "local/smollm2-135m", parallel=2), rows).timing
    prompt = min(_row_tokens(domains[0]), 2048)  # cut to gateway.local_context
    row = prompt / LOCAL_PROMPT_TOKENS_PER_S + LOCAL_ANSWER_TOKENS / LOCAL_TOKENS_PER_S
    assert local.evaluation_s == pytest.approx(40 * row)  # one call at a time: its one server does the work
    assert local.meta_s == pytest.approx(10 * (2048 / LOCAL_PROMPT_TOKENS_PER_S
                                               + META_COMPLETION_TOKENS / LOCAL_TOKENS_PER_S))
    assert local.run_s == pytest.approx(local.initial_s + 3 * (local.meta_s + local.evaluation_s))  # not 2 at once
    assert "the local model reading 130 and writing 63 tokens/s, one call at a time" in local.line()


@pytest.mark.e2e
def test_a_run_ends_with_best_against_initial_and_the_generations_mean_time(tmp_path, fake_openai):
    fake_openai.set_responder(responder({1: [IMPROVE]}, []))
    r = run_loop(tmp_path, fake_openai, "--max_generation", "1", "--parent_selection", "best",
                 config=loop_config(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "out" / "run"
    found = nodes(run_dir)

    def val_rows(node: dict) -> dict:
        key = node["eval_keys"]["imo_grading"]["val"]
        return json.loads((run_dir / "evals" / key / "report.json").read_text())["row_scores"]

    best, initial = val_rows(found["1"]), val_rows(found["initial"])
    gaps = [best[q] - initial[q] for q in sorted(best)]
    assert len(gaps) == 20 and set(best) == set(initial)
    low, high = bootstrap_mean(gaps)
    b, i = found["1"]["scores"]["imo_grading"]["val"], found["initial"]["scores"]["imo_grading"]["val"]
    assert b == 1.0 > i and sum(gaps) / 20 == pytest.approx(b - i)
    lines = r.stdout.splitlines()
    assert (f"best vs initial on imo_grading/val: node 1 {b:.3f} vs initial {i:.3f}, difference "
            f"{sum(gaps) / 20:+.3f} [{low:+.3f}, {high:+.3f}] (95%, paired over 20 shared rows)") in lines
    done = (f"generations 1 of 1 done, {duration(found['1']['seconds']['total'])} each on average (the initial "
            f"node's evaluation {duration(found['initial']['seconds']['total'])})")
    assert lines.index(done) == len(lines) - 2 and lines[-1].startswith("report: ")
    # The plan said how long it would take, and for one generation, in the singular.
    assert "loop     1 generation, parent selection best" in lines
    timing = next(x for x in lines if x.startswith("time     ~"))
    assert "for the run: initial evaluation ~" in timing and "assuming 60 tokens/s written by a provider's model" \
        in timing


def test_a_run_whose_local_meta_model_made_no_edit_says_why_and_what_to_try():
    from archive.records import Node, Status
    from optimizer.plan import no_edit_note
    from services.config import Config

    local = Config.from_dict({"models": {"meta": "local/smollm2-135m"}})
    run = [Node("initial", None, 0, status=Status.OK), Node("1", "initial", 1, status=Status.NO_CHANGE),
           Node("2", "initial", 2, status=Status.NO_CHANGE)]
    note = no_edit_note(run, local)
    assert note is not None and "--preset demo" in note and "made no edit" in note
    assert no_edit_note(run, Config.from_dict({"models": {"meta": "openai/gpt-4o"}})) is None  # a real model: no excuse
    assert no_edit_note([*run, Node("3", "2", 3, status=Status.OK)], local) is None  # a child was made
    assert no_edit_note(run[:1], local) is None  # no generation yet
