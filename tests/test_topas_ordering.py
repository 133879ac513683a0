"""TOPAS's admission-list orderings (docs/topas.md, "Admission list")."""

from __future__ import annotations

from topas.scheduler.ordering import group_by_agent


def test_group_by_agent_pulls_each_agents_calls_behind_its_first_and_keeps_the_rest_in_order():
    agent = {"s1": "S", "j1": "J", "s2": "S", "l1": "L", "j2": "J", "s3": "S"}
    assert group_by_agent(["s1", "j1", "s2", "l1", "j2", "s3"], agent) == ["s1", "s2", "s3", "j1", "j2", "l1"]
    assert group_by_agent([], agent) == []


def test_the_switch_is_off_by_default_and_the_policy_accepts_it():
    from topas.policy import create_policy

    assert create_policy("topas", {}).params.group_agents is False
    assert create_policy("topas", {"group_agents": True}).params.group_agents is True
