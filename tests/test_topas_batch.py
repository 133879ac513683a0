"""J_batch, TOPAS's price for the batch consequence of a resident set (docs/topas.md, "Consolidation"):
consolidation is chosen where memory is the bottleneck and not where the batch is demand-limited."""

from __future__ import annotations

import pytest

from topas.scheduler import score
from topas.scheduler.batch import BatchPricing, ReadyRates
from topas.scheduler.search import AgentOption, Problem, Weights, search


def _ag(name: str, tokens: int, forced: bool = False) -> AgentOption:
    return AgentOption(name, tokens, forced, on_gpu=True, move_in_s=0.0, reuse_n=0, reload_s=0.0)


def _problem(ready_rate_a: float, batch: bool = True) -> Problem:
    """Agent a runs (its 3,000-token prefix is locked) with three calls of a waiting; one call of agent b
    (3,000-token prefix, 20 s service) waits with a larger gain. Everything fits now (11,000 of 12,000)."""
    waiting = {"a1": ("a", 1, 10.0), "a2": ("a", 2, 10.0), "a3": ("a", 3, 10.0), "b1": ("b", 4, 12.0)}

    def chain(t, elig):
        return [(rid, g) for rid, (agent, task, g) in waiting.items() if task == t and agent in elig]

    return Problem(
        budget=12_000, base_tokens=1_000, agents={"a": _ag("a", 3_000, forced=True), "b": _ag("b", 3_000)},
        request_agent={r: v[0] for r, v in waiting.items()}, request_task={r: v[1] for r, v in waiting.items()},
        request_tokens=dict.fromkeys(waiting, 1_000),
        task_agents={v[1]: frozenset({v[0]}) for v in waiting.values()},
        chain=chain, swap_s_per_token=1e-5, max_actions=64, weights=Weights(move=False, reuse=False),
        batch=BatchPricing(call_tokens=1_000, call_s=10.0, ready_rate={"a": ready_rate_a}, expected_gain=10.0) if batch else None,
        service_s={"a1": 10.0, "a2": 10.0, "a3": 10.0, "b1": 20.0},
    )


def test_memory_bound_consolidation_defers_the_new_agent():
    # a's calls become ready at 0.5/s: while b's prefix stays locked (20 s), ten more a calls come and
    # only one fits next to both prefixes; without b, the five expected in 10 s all fit
    plan = search(_problem(ready_rate_a=0.5), 6)
    assert sorted(plan.admit) == ["a1", "a2", "a3"] and "b" not in plan.resident
    assert plan.memory <= 12_000


def test_demand_limited_batch_opens_the_new_agent():
    plan = search(_problem(ready_rate_a=0.0), 6)
    assert sorted(plan.admit) == ["a1", "a2", "a3", "b1"]


def test_without_j_batch_the_new_agent_is_opened_whatever_the_demand():
    plan = search(_problem(ready_rate_a=0.5, batch=False), 6)
    assert "b1" in plan.admit


@pytest.mark.parametrize("free, expected", [(10_000, 0.0), (3_000, 70.0), (0, 100.0), (-5_000, 100.0)])
def test_j_batch_prices_the_calls_the_free_kv_cannot_hold(free, expected):
    assert score.j_batch([10.0] * 10, 1_000, free) == pytest.approx(expected)
    assert score.j_batch([], 1_000, free) == 0.0


def test_ready_rates_count_a_window_of_ready_events():
    r = ReadyRates(window_s=100.0)
    for t in range(0, 50, 5):
        r.observe("a", float(t))
    assert r.rate("a", 50.0) == pytest.approx(10 / 50)  # ten events over the 50 s seen
    assert r.rate("a", 200.0) == 0.0  # all older than the window
    assert r.rate("b", 50.0) == 0.0
