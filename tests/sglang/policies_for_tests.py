"""Tiny policies used by the SGLang end-to-end tests.

Loaded inside the server's scheduler process by file path (`TOPAS_POLICY_MODULES`),
so this file must not import pytest or anything test-only. Not collected by pytest
(no `test_` prefix)."""

from __future__ import annotations

from dataclasses import dataclass

from topas.policy import Decision, Policy, SchedulerView, register_policy


@register_policy("test_node_desc")
class NodeDescending(Policy):
    """Admit waiting requests by node name, descending (differs from arrival order)."""

    def schedule(self, view: SchedulerView) -> Decision:
        order = sorted(view.waiting, key=lambda r: r.node, reverse=True)
        return Decision(admit=tuple(r.rid for r in order))


@register_policy("test_pin")
class PinAgents(Policy):
    """FCFS admission; keeps the prefixes of `agents` pinned on device."""

    @dataclass(frozen=True)
    class Params:
        agents: tuple[str, ...] = ()

    def schedule(self, view: SchedulerView) -> Decision:
        return Decision(admit=tuple(r.rid for r in view.waiting), pin=frozenset(self.params.agents))


@register_policy("test_hold")
class HoldNodes(Policy):
    """FCFS, but holds back requests whose node starts with `prefix` while any other
    request waits or runs."""

    @dataclass(frozen=True)
    class Params:
        prefix: str = "late"

    def schedule(self, view: SchedulerView) -> Decision:
        others = [r for r in view.waiting if not r.node.startswith(self.params.prefix)]
        busy = bool(others) or any(not r.node.startswith(self.params.prefix) for r in view.running)
        admit = [r.rid for r in view.waiting if not (busy and r.node.startswith(self.params.prefix))]
        return Decision(admit=tuple(admit))


@register_policy("test_preempt")
class PreemptForUrgent(Policy):
    """FCFS, except that a waiting request whose node starts with `urgent` goes first and
    preempts every running request that is not urgent."""

    @dataclass(frozen=True)
    class Params:
        urgent: str = "urgent"

    def schedule(self, view: SchedulerView) -> Decision:
        def is_urgent(r) -> bool:
            return r.node.startswith(self.params.urgent)

        urgent = [r for r in view.waiting if is_urgent(r)]
        rest = [r for r in view.waiting if not is_urgent(r)]
        preempt = tuple(r.rid for r in view.running if not is_urgent(r)) if urgent else ()
        return Decision(admit=tuple(r.rid for r in urgent + rest), preempt=preempt)
