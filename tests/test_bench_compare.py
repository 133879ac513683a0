"""The overhead comparison reads the benchmark's decision line (the comparison itself prints figures, untimed here)."""

import pytest

from topas.bench_compare import DECISION_BENCH, bench_overrides, parse_bench


def test_the_decision_line_is_read():
    out = "speed                 9x real time\npolicy decisions      3224 (1.297 ms mean, 2.692 ms p99)\n"
    assert parse_bench(out) == (3224, 1.297, 2.692)


def test_output_without_decisions_is_an_error():
    with pytest.raises(ValueError, match="policy decisions"):
        parse_bench("simulated time        10.0 s\n")


def test_without_overrides_the_decision_cost_bench_is_run():
    """topas.bench alone is a policy-free FCFS run (decisions cost ~0): comparing it would say nothing."""
    assert bench_overrides([]) == DECISION_BENCH and "scheduler=topas" in DECISION_BENCH
    assert bench_overrides(["scheduler=lpm"]) == ["scheduler=lpm"]
