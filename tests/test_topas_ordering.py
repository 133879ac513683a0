"""TOPAS's admission-list orderings (docs/topas.md, "Admission list")."""

from __future__ import annotations

import pytest

from topas.scheduler.ordering import AdmissionOrder, group_by_agent, task_value


def test_group_by_agent_pulls_each_agents_calls_behind_its_first_and_keeps_the_rest_in_order():
    agent = {"s1": "S", "j1": "J", "s2": "S", "l1": "L", "j2": "J", "s3": "S"}
    assert group_by_agent(["s1", "j1", "s2", "l1", "j2", "s3"], agent) == ["s1", "s2", "s3", "j1", "j2", "l1"]
    assert group_by_agent([], agent) == []


def test_groups_ranked_by_value_largest_first_ties_keep_list_order():
    agent = {"s1": "S", "l1": "L", "r1": "R", "s2": "S", "j1": "J"}
    value = {"s1": 1.0, "s2": 1.0, "l1": 5.0, "r1": 5.0, "j1": 9.0}
    ranked = group_by_agent(["s1", "l1", "r1", "s2", "j1"], agent, lambda g: max(value[r] for r in g))
    assert ranked == ["j1", "l1", "r1", "s1", "s2"]


def test_a_fan_out_is_valued_by_its_whole_progress_not_its_first_branchs_marginal_gain():
    # two tied branches: the first admitted barely shortens the path, the second removes the wait
    fan_out = [("l", 0.2), ("r", 9.8)]
    single = [("s", 6.0)]
    assert fan_out[0][1] < single[0][1]
    assert task_value(fan_out) > task_value(single)


def test_agent_by_task_is_the_default_and_unknown_orders_are_refused_in_one_line():
    from topas.policy import create_policy

    params = create_policy("topas", {}).params
    assert params.admission_order is AdmissionOrder.PLAN_BY_TASK
    assert params.pin_for_reuse is False
    assert create_policy("topas", {"admission_order": "gain"}).params.admission_order is AdmissionOrder.GAIN
    with pytest.raises(ValueError, match="admission_order: 'fifo' is not one of"):
        create_policy("topas", {"admission_order": "fifo"})


def _fan_out_view():
    """An older task (arrived at 0) waits on two tied branches of different agents (l, r); a newer task
    (arrived at 1) waits on its only call (agent s). The pool holds everything."""
    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress
    from topas.workflow import Agent, TemplateStage, WorkflowTemplate

    agents = {a: Agent(a, 500) for a in ("l", "r", "s")}
    templates = {"pair": WorkflowTemplate("pair", agents, {"L": TemplateStage("L", "l"), "R": TemplateStage("R", "r")}),
                 "one": WorkflowTemplate("one", agents, {"x": TemplateStage("x", "s")})}
    old = [req_info("1:L", "l", 1, stage="L", arrival=0.0, ready=0.5), req_info("1:R", "r", 1, stage="R", arrival=0.0, ready=0.5)]
    new = req_info("0:x", "s", 0, stage="x", arrival=1.0, ready=1.0)
    tasks = {1: TaskProgress(1, "pair", 0.0, waiting=("1:L", "1:R")), 0: TaskProgress(0, "one", 1.0, waiting=("0:x",))}
    prefixes = {a: PrefixState(a, 500, 500, 0, pinned=False, in_use=False) for a in agents}
    return make_view([new, *old], tasks=tasks, templates=templates, prefixes=prefixes, now=1.0, kv=30000)


def test_agent_by_task_lists_a_fan_outs_branches_before_a_newer_tasks_only_call():
    """By each call's own gain the newer task's call comes first (a first branch's marginal gain is small);
    ranked by the task a group serves, the older task's branches come first."""
    from topas.policy import create_policy

    view = _fan_out_view()
    by_gain = create_policy("topas", {"admission_order": "gain"}).schedule(view).admit
    by_task = create_policy("topas").schedule(view).admit
    assert by_gain[0] == "0:x"
    assert set(by_task[:2]) == {"1:L", "1:R"} and by_task[2] == "0:x"


def test_reuse_pins_are_off_by_default():
    from topas.policy import create_policy

    assert create_policy("topas", {"pin_for_reuse": True}).params.pin_for_reuse is True


def _reuse_view():
    """Task 0 (A -> B) runs its A call; B's prefix sits idle on the GPU, one hop downstream; nothing waits."""
    import dataclasses

    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress
    from topas.workflow import Agent, TemplateStage, WorkflowTemplate

    agents = {"a": Agent("a", 500), "b": Agent("b", 500)}
    tpl = WorkflowTemplate("ab", agents, {"A": TemplateStage("A", "a"), "B": TemplateStage("B", "b", deps=("A",))})
    run = dataclasses.replace(req_info("0:A", "a", 0, stage="A", cached=500, generated=10), admitted_time=0.0)
    tasks = {0: TaskProgress(0, "ab", 0.0, running=("0:A",))}
    prefixes = {"a": PrefixState("a", 500, 500, 0, pinned=False, in_use=True),
                "b": PrefixState("b", 500, 500, 0, pinned=False, in_use=False)}
    return make_view(running=[run], tasks=tasks, templates={"ab": tpl}, prefixes=prefixes, now=1.0, kv=30000)


def test_an_idle_downstream_prefix_is_pinned_for_reuse_only_with_pin_for_reuse():
    from topas.policy import create_policy

    view = _reuse_view()
    assert "b" in create_policy("topas", {"pin_for_reuse": True}).schedule(view).pin
    assert "b" not in create_policy("topas").schedule(view).pin
