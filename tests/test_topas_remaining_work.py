"""TOPAS's remaining-work factor of the task weights (docs/topas.md, "The score"; docs/decisions/0033): the pure
functions, the breakdown term, and the ordering it defines (less work left first), with its ablation."""

from __future__ import annotations

import pytest

from topas.scheduler.build import remaining_work_factors
from topas.scheduler.score import remaining_work, score_state


def test_the_factor_is_the_reference_work_over_the_tasks_own():
    assert remaining_work(10.0, 20.0) == pytest.approx(2.0)
    assert remaining_work(20.0, 20.0) == 1.0
    assert remaining_work(40.0, 20.0) == pytest.approx(0.5)
    assert remaining_work(0.0, 20.0) < float("inf")  # a task about to finish keeps a finite weight


def test_the_reference_is_the_scored_tasks_mean_and_running_tasks_get_a_factor_too():
    f = remaining_work_factors({0: 10.0, 1: 30.0, 2: 5.0}, scored=[0, 1])
    assert f[0] == pytest.approx(2.0) and f[1] == pytest.approx(20.0 / 30.0)
    assert f[2] == pytest.approx(4.0)  # running only (a preemption's J_revoke reads it)
    assert remaining_work_factors({0: 10.0}, scored=[]) == {}


def test_the_breakdown_carries_the_factor_as_its_own_part_of_j_admit():
    from test_topas_opening_cost import _problem

    p = _problem()
    # a1: weight 2.0 = aging 1.0 x factor 2.0; its gain 8.0 is a plain path drop of 4.0
    p.task_aging = {**p.task_aging, 1: 2.0}
    p.task_remaining_work = {1: 2.0}
    b = score_state(p, frozenset("a"), ["a1"], {"a1": 8.0}, 1500)
    assert (b.j_admit, b.aging, b.remaining_work) == pytest.approx((8.0, 0.0, 4.0))
    # a2: weight 0.75 = aging 1.5 x factor 0.5; gain 3.0, plain 4.0, aged 6.0
    p.task_aging = {**p.task_aging, 2: 0.75}
    p.task_remaining_work = {2: 0.5}
    b = score_state(p, frozenset("a"), ["a2"], {"a2": 3.0}, 1500)
    assert (b.j_admit, b.aging, b.remaining_work) == pytest.approx((3.0, 2.0, -3.0))
    assert b.j_admit == pytest.approx(4.0 + b.aging + b.remaining_work)


def _two_tasks_view():
    """Task 0 (arrived at 0) waits on the first call of a three-call chain (agent x); task 1 (arrived at 2) on its
    only call (agent y). Both prefixes are on the GPU and the pool holds everything."""
    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress
    from topas.workflow import Agent, TemplateStage, WorkflowTemplate

    agents = {a: Agent(a, 500) for a in ("x", "y")}
    chain = {"A": TemplateStage("A", "x"), "B": TemplateStage("B", "x", ("A",)), "C": TemplateStage("C", "x", ("B",))}
    templates = {"chain": WorkflowTemplate("chain", agents, chain),
                 "one": WorkflowTemplate("one", agents, {"Y": TemplateStage("Y", "y")})}
    waiting = [req_info("0:A", "x", 0, stage="A", arrival=0.0, ready=0.0),
               req_info("1:Y", "y", 1, stage="Y", arrival=2.0, ready=2.0)]
    tasks = {0: TaskProgress(0, "chain", 0.0, waiting=("0:A",)), 1: TaskProgress(1, "one", 2.0, waiting=("1:Y",))}
    prefixes = {a: PrefixState(a, 500, 500, 0, pinned=False, in_use=False) for a in agents}
    return make_view(waiting, tasks=tasks, templates=templates, prefixes=prefixes, now=10.0, kv=30_000)


def test_the_task_with_less_work_left_goes_first_and_the_ablation_turns_it_off():
    """Shortest remaining work first (Smith's rule) over a small age difference; without the factor the older task
    goes first (aging)."""
    from topas.policy import create_policy

    view = _two_tasks_view()
    assert create_policy("topas").schedule(view).admit[0] == "1:Y"
    assert create_policy("topas", {"use_remaining_work": False}).schedule(view).admit[0] == "0:A"
    assert create_policy("topas_no_remaining_work").schedule(view).admit[0] == "0:A"  # the ablation is that switch
