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


def test_profile_takes_an_optional_count_and_leaves_the_overrides():
    from topas.bench import profile_arg

    assert profile_arg(["scheduler=topas"]) == (["scheduler=topas"], None)
    assert profile_arg(["scheduler=topas", "--profile"]) == (["scheduler=topas"], 25)
    assert profile_arg(["--profile", "7", "workload=dag4"]) == (["workload=dag4"], 7)


def test_the_profile_covers_the_policys_decisions_and_leaves_the_run_as_it_is(capsys):
    """Only `schedule` calls are profiled (the engine's own functions are absent), and the run's figures are the
    same as without the profiler: the policy is wrapped, not changed."""
    from topas import bench

    small = ["scheduler=topas", "workload.num_tasks=12"]
    bench.main(small)
    plain = capsys.readouterr().out
    bench.main(small + ["--profile", "40"])
    out = capsys.readouterr().out
    assert "(schedule)" in out and "search.py" in out and "engine.py" not in out
    same = [line for line in plain.splitlines() if line.startswith(("simulated time", "engine iterations"))]
    assert same and all(line.split("(")[0] in out for line in same)
