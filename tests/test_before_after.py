"""bench/before_after.py reads what the two bench drivers print with --json, and refuses their prose."""

from __future__ import annotations

import json

import pytest

from bench import before_after, generation_overhead, harness_throughput


def harness_run(sampling_s: float) -> dict:
    memory = harness_throughput.MemoryPeaks(peak_kb={10: 280 * 1024, 11: 27 * 1024},
                                            label={10: "harness", 11: "worker+relay"},
                                            cmd={10: "python -m domains.harness", 11: "python worker.py"})
    m = harness_throughput.Measurement(
        samples=100, workers=10, latency=0.2, returncode=0, run_meta={"rows": 100, "done": 100}, requests=100,
        answered=100, first_request=1000.0, last_answer=1000.0 + sampling_s, total_s=8.0, harness_pid=10,
        memory=memory, listen_overflows=0, log_tail="", messages=[])
    return harness_throughput.result_json(m)


def test_reads_both_drivers_json_and_refuses_prose() -> None:
    gen = generation_overhead.result_json("bwrap", {"status": "ok", "seconds": {"total": 1.5}}, 42, 1.0, 1.5,
                                          {"controller": 312.0}, ["python -m run_optimization"])
    got = before_after.read_result("some log line\n" + json.dumps(gen) + "\n", "generation_overhead")
    assert got["framework_s"] == pytest.approx(0.5)
    harness = before_after.read_result(json.dumps(harness_run(2.5)), "harness_throughput")
    assert harness["failure"] is None and harness["peak_rss_mb"]["worker"] == pytest.approx(27.0)
    with pytest.raises(ValueError, match="no JSON"):
        before_after.read_result("framework time            0.58 s  target < 1.5 s: PASS\n", "generation_overhead")
    with pytest.raises(ValueError, match="lacks framework_s"):
        before_after.read_result(json.dumps({k: v for k, v in gen.items() if k != "framework_s"}),
                                 "generation_overhead")


def test_throughput_ratio_is_rows_per_second_after_over_before() -> None:
    gen = {"framework_s": 0.5, "wall_s": 1.5, "peak_rss_mb": {"controller": 300.0}}
    before = {"generation_overhead": [gen], "harness_throughput": [harness_run(2.0), harness_run(2.4), harness_run(9)]}
    after = {"generation_overhead": [gen], "harness_throughput": [harness_run(2.5), harness_run(3.0), harness_run(1)]}
    b, a = before_after.measures(before), before_after.measures(after)
    assert before_after.ratio(a["harness throughput (rows/s)"], b["harness throughput (rows/s)"]) \
        == pytest.approx(2.4 / 2.5)  # medians of rows/s: 100/2.5 after, 100/2.4 before
    assert before_after.peaks(after)["harness worker"] == pytest.approx(27.0)
