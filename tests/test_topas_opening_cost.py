"""TOPAS's opening cost (J_hold, docs/topas.md, "The score"; docs/decisions/0024) and cached-context value
(docs/decisions/0027): the pure functions, and the state score's breakdown that carries them."""

from __future__ import annotations

import pytest

from topas.scheduler.problem import AgentOption, Head, Problem
from topas.scheduler.score import j_hold, score_state


def test_the_opening_cost_is_the_gain_the_displaced_calls_earn_per_service_period_for_the_hold():
    # 1000 tokens held for 4 s: the first call (500 tokens) is displaced whole, the second (1000) half
    displaced = [(500, 10.0, 2.0), (1000, 6.0, 2.0)]
    assert j_hold(1000, 4.0, displaced) == pytest.approx((10.0 + 3.0) * 4.0 / 2.0)
    assert j_hold(1000, 4.0, []) == 0.0  # nothing else waits: opening costs nothing
    assert j_hold(200, 4.0, displaced) == pytest.approx(10.0 * 200 / 500 * 4.0 / 2.0)


def _problem() -> Problem:
    # agent a is held by running calls; b is not. Task 0's call needs b; tasks 1 and 2 wait for a.
    agents = {"a": AgentOption("a", 1000, True, True, 0.0, 0, 0.1), "b": AgentOption("b", 800, False, True, 0.0, 0, 0.1)}
    p = Problem(kv_pool_tokens=10_000, base_tokens=0, agents=agents,
                request_agent={"b0": "b", "a1": "a", "a2": "a"}, request_task={"b0": 0, "a1": 1, "a2": 2},
                request_tokens={"b0": 400, "a1": 500, "a2": 500},
                task_agents={0: frozenset("b"), 1: frozenset("a"), 2: frozenset("a")},
                chain=lambda t, e: [], swap_s_per_token=1e-5, max_actions=64,
                task_aging={0: 1.5, 1: 1.0, 2: 0.5}, task_remaining_work={2: 0.5})
    service = {"b0": 3.0, "a1": 2.0, "a2": 2.0}
    heads = [Head("a1", "a", 500, 8.0, 2.0), Head("b0", "b", 400, 6.0, 3.0), Head("a2", "a", 500, 4.0, 2.0)]
    p.opening = lambda _: (service, heads)
    return p


def test_a_state_that_opens_an_agent_is_charged_what_its_prefix_displaces():
    p = _problem()
    gains = {"b0": 6.0, "a1": 8.0, "a2": 4.0}
    opened = score_state(p, frozenset("ab"), ["b0"], gains, 1000 + 800 + 400)
    # b's 800 tokens would serve a1 (500) and 300 of a2's 500: their gain per 2 s service, for b0's 3 s
    assert opened.j_hold == pytest.approx(j_hold(800, 3.0, [(500, 8.0, 2.0), (500, 4.0, 2.0)]))
    assert opened.j_hold == pytest.approx((8.0 + 4.0 * 300 / 500) * 3.0 / 2.0)
    assert opened.total == pytest.approx(opened.j_admit - opened.j_move + opened.v_reuse - opened.j_hold)
    # the same state with a1 admitted too: only a2 is left to displace
    both = score_state(p, frozenset("ab"), ["b0", "a1"], gains, 1000 + 800 + 900)
    assert both.j_hold == pytest.approx(j_hold(500, 3.0, [(500, 4.0, 2.0)]))
    # an agent that running calls hold is not opened: no cost
    assert score_state(p, frozenset("a"), ["a1", "a2"], gains, 2000).j_hold == 0.0


def test_the_breakdown_splits_j_admit_into_plain_gains_aging_and_the_remaining_work_factor():
    p = _problem()
    # a2's gain 4.0 carries its weight 0.5 = aging 1.0 x remaining-work factor 0.5: plain 8.0, aged 8.0
    b = score_state(p, frozenset("a"), ["a2"], {"a2": 4.0}, 1500)
    assert (b.j_admit, b.aging, b.remaining_work) == pytest.approx((4.0, 0.0, -4.0))
    # b0: weight 1.5 = aging 1.5, factor 1: plain 4.0
    b = score_state(p, frozenset("ab"), ["b0"], {"b0": 6.0}, 2200)
    assert (b.j_admit, b.aging, b.remaining_work) == pytest.approx((6.0, 2.0, 0.0))


def test_a_calls_cached_context_is_worth_its_reload_at_the_weight_of_every_task_read():
    from topas.scheduler.score import context_value

    assert context_value(0.5, sum([2.0, 1.0, 1.0])) == pytest.approx(2.0)
    assert context_value(0.0, 5.0) == 0.0 and context_value(0.5, 0.0) == 0.0


def test_the_breakdown_carries_the_admitted_calls_context_value_inside_j_admit():
    p = _problem()
    p.context_s = {"a2": 1.0}
    # a2's chain gain 5.0 = its weighted path drop 4.0 (weight 0.5 = aging 1.0 x factor 0.5) + context 1.0
    b = score_state(p, frozenset("a"), ["a2"], {"a2": 5.0}, 1500)
    assert (b.j_admit, b.context, b.aging, b.remaining_work) == pytest.approx((5.0, 1.0, 0.0, -4.0))
    assert b.total == pytest.approx(5.0 - b.j_move + b.v_reuse)


def _context_view(host: bool):
    """One agent (prefix 1,000 tokens), two one-call tasks of the same age: task 0's call is ready first, task 1's
    has 4,000 tokens of its prompt beyond the prefix still cached (a conversation's earlier turns)."""
    import dataclasses

    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress
    from topas.workflow import Agent, TemplateStage, WorkflowTemplate

    tpl = WorkflowTemplate("one", {"a": Agent("a", 1000)}, {"A": TemplateStage("A", "a")})
    waiting = [req_info("0:A", "a", 0, stage="A", prompt=6000, prefix=1000, cached=1000, ready=0.0),
               req_info("1:A", "a", 1, stage="A", prompt=6000, prefix=1000, cached=5000, ready=5.0)]
    tasks = {t: TaskProgress(t, "one", 0.0, waiting=(f"{t}:A",)) for t in (0, 1)}
    prefixes = {"a": PrefixState("a", 1000, 1000, 0, pinned=False, in_use=False)}
    view = make_view(waiting, tasks=tasks, templates={"one": tpl}, prefixes=prefixes, now=30.0, kv=30_000)
    return view if host else dataclasses.replace(view, host_capacity_tokens=0)


@pytest.mark.parametrize("host", [True, False])
def test_a_call_whose_context_is_still_cached_goes_first_and_the_switch_turns_it_off(host):
    from topas.policy import create_policy

    view = _context_view(host)
    assert create_policy("topas").schedule(view).admit[0] == "1:A"
    assert create_policy("topas", {"use_context": False}).schedule(view).admit[0] == "0:A"
    assert create_policy("topas_no_context").schedule(view).admit[0] == "0:A"  # the ablation is that switch
