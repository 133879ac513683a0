"""TOPAS's phase switch (topas/scheduler/switching.py; docs/topas.md, "The phase switch"; docs/decisions/0030): the
exchange argument's terms as pure functions, and a decision that drains the running phase for an old task's call."""

from __future__ import annotations

import dataclasses

import pytest

from topas.scheduler.switching import (
    QueuedCall,
    RunningCall,
    best_batch,
    drain_time,
    excludes,
    phase_time,
    switch_value,
)


def test_the_switch_value_is_what_b_saves_less_what_a_waits_less_the_overhead_everyone_waits():
    v = switch_value(w_b=10.0, p_a=8.0, w_a=4.0, drain_s=1.0, p_b=2.0, w_rest=6.0, sigma_s=0.5, idle_b=1.5)
    assert (v.saved, v.a_waits, v.overhead) == pytest.approx((80.0, 4.0 * 3.0, 10.0 * 2.0))
    assert v.total == pytest.approx(80.0 - 12.0 - 20.0)


def test_a_phase_lasts_its_kv_seconds_over_the_room_and_at_least_its_longest_call():
    assert phase_time(kv_s=40_000.0, longest_s=2.0, room=10_000) == pytest.approx((4.0, 0.0))
    t, idle = phase_time(kv_s=5_000.0, longest_s=2.0, room=10_000)  # one short call in a large room
    assert (t, idle) == pytest.approx((2.0, 1.5))


def test_the_drain_frees_calls_shortest_first_and_a_prefix_with_its_agents_last_call():
    running = [RunningCall(5.0, "a", 1000), RunningCall(1.0, "a", 1000), RunningCall(3.0, "c", 500)]
    prefix = {"a": 8000, "c": 2000}
    used = 2500 + 8000 + 2000  # the calls' KV and both prefixes: 12,500 of 20,000
    assert drain_time(running, prefix, used, 7000, 20_000) == 0.0  # fits now
    assert drain_time(running, prefix, used, 8000, 20_000) == 1.0  # the first a call frees 1,000
    assert drain_time(running, prefix, used, 10_000, 20_000) == 3.0  # c's call frees 500 and c's prefix
    assert drain_time(running, prefix, used, 19_000, 20_000) == 5.0  # everything ends


def test_the_batch_is_the_densest_calls_whose_value_is_largest():
    calls = [QueuedCall("light", 1.0, 1000, 1.0), QueuedCall("heavy", 8.0, 1000, 1.0), QueuedCall("mid", 3.0, 1000, 1.0)]

    def value(w, p, idle):  # each call's weight saves 10 s; each second of the phase costs 20
        return switch_value(w, 10.0, 20.0, 0.0, p, 0.0, 0.0, 0.0)

    v, rids = best_batch(calls, room=1000, value=value)
    assert rids == ["heavy", "mid"]  # adding "light" saves 10 and costs 20
    assert v.total == pytest.approx(11.0 * 10.0 - 20.0 * 2.0)
    assert best_batch(calls, room=1000, value=lambda w, p, idle: switch_value(w, 1.0, 20.0, 0.0, p, 0.0, 0.0, 0.0)) \
        == (None, [])  # no batch pays


def test_an_agent_is_excluded_only_when_its_prefix_outweighs_the_calls_beside_it_and_it_does_not_fit():
    assert excludes(prefix_b=9000, min_kv_b=800, running_tokens=2000, forced_tokens=9000, pool=20_000)
    assert not excludes(9000, 800, 1000, 9000, 20_000)  # fits beside the running calls
    assert not excludes(5000, 800, 8000, 9000, 20_000)  # a small prefix joins as calls end


def _phase_view(now: float):
    """Two agents of 9,000-token prefixes in a 20,000-token pool. Two young tasks run their a calls; 20 young tasks
    wait on theirs; task 0, which arrived at 0, waits on its last call, at b, just ready (not overdue): b cannot
    join the running phase."""
    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress
    from topas.workflow import Agent, TemplateStage, WorkflowTemplate

    agents = {"a": Agent("a", 9000), "b": Agent("b", 9000)}
    tpl = WorkflowTemplate("ab", agents, {"A": TemplateStage("A", "a"), "B": TemplateStage("B", "b", deps=("A",))})

    def call(rid, agent, t, stage, arrival, prompt=11_000, ready=None):
        return req_info(rid, agent, t, stage=stage, arrival=arrival, ready=arrival if ready is None else ready,
                        prompt=prompt, prefix=9000, cached=9000 if agent == "a" else 0)

    old = call("0:B", "b", 0, "B", 0.0, prompt=9500, ready=now - 0.5)  # just ready: not overdue
    young = [call(f"{t}:A", "a", t, "A", now - 1.0) for t in range(3, 23)]
    running = [dataclasses.replace(call(f"{t}:A", "a", t, "A", now - 2.0), generated_tokens=10, admitted_time=now - 2.0)
               for t in (1, 2)]
    tasks = {0: TaskProgress(0, "ab", 0.0, stage_done={"A": 1}, waiting=("0:B",)),
             **{t: TaskProgress(t, "ab", now - 2.0, running=(f"{t}:A",)) for t in (1, 2)},
             **{t: TaskProgress(t, "ab", now - 1.0, waiting=(f"{t}:A",)) for t in range(3, 23)}}
    prefixes = {"a": PrefixState("a", 9000, 9000, 0, pinned=False, in_use=True),
                "b": PrefixState("b", 9000, 0, 9000, pinned=False, in_use=False)}
    return make_view([old, *young], running, tasks=tasks, templates={"ab": tpl}, prefixes=prefixes, now=now, kv=20_000)


def test_an_old_tasks_call_of_an_excluded_agent_heads_the_list_and_nothing_pins_the_running_phase():
    """Task 0 has waited 3,000 s; ending a's phase for its call saves it the wait for the 20 young calls at a
    and costs them one call's service: its batch heads the list, the engine drains a's calls for it, and a's
    prefix is not pinned. Without the switch (the ablation), or when task 0 is as young as the rest, a's calls
    go first."""
    from topas.policy import create_policy

    old = _phase_view(now=3000.0)
    d = create_policy("topas").schedule(old)
    assert d.admit[0] == "0:B" and d.stop_at_first_misfit and d.pin == frozenset()  # nothing held through a drain
    assert create_policy("topas_no_switch").schedule(old).admit[0] != "0:B"
    assert create_policy("topas", {"use_switch": False}).schedule(old).admit[0] != "0:B"
    young = _phase_view(now=3.0)
    assert create_policy("topas").schedule(young).admit[0] != "0:B"
