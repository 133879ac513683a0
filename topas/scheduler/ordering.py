"""Orderings of TOPAS's admission list (docs/topas.md, "Admission list")."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any


class AdmissionOrder(str, Enum):
    """How the admission list is ordered after the search (`TopasParams.admission_order`)."""

    GAIN = "gain"  # by each call's own age-weighted gain (the search's order)
    AGENT_BY_CALL = "agent_by_call"  # grouped by agent; groups ranked by their best call's gain
    AGENT_BY_TASK = "agent_by_task"  # grouped by agent; groups ranked by the best task they serve
    PLAN_BY_TASK = "plan_by_task"  # AGENT_BY_TASK within the search's plan; the fill after it, by agent


def group_by_agent(rids: Sequence[str], agent_of: Mapping[str, str],
                   group_value: Callable[[list[str]], Any] | None = None) -> list[str]:
    """Each agent's calls pulled together, in list order within the group, so that calls sharing a
    prefix are admitted together (as Parrot's ctx_group). Groups keep the order of their first call,
    or, with `group_value`, are ranked by it (largest first; ties keep list order)."""
    by_agent: dict[str, list[str]] = {}
    for rid in rids:
        by_agent.setdefault(agent_of[rid], []).append(rid)
    groups = list(by_agent.values())
    if group_value is not None:
        groups.sort(key=group_value, reverse=True)  # stable: ties keep list order
    return [rid for group in groups for rid in group]


def task_value(chain: Sequence[tuple[str, float]]) -> float:
    """A task's whole conditional progress: the age-weighted drop of its longest remaining path when
    all its ready calls are admitted (the sum of its admission chain's marginal gains). Ranking by it
    rather than by one call's marginal gain keeps a fan-out's first branch, whose own gain is small
    until its sibling runs too, from trailing other tasks' single calls."""
    if len(chain) == 1:  # the common case; the sum below would add it to 0
        return 0.0 + chain[0][1]
    return sum([g for _, g in chain])


def group_demand(group: Sequence[str], value_of: Callable[[str], float]) -> tuple[float, int]:
    """What an agent group serves: the summed value of its calls' tasks, then its number of calls (ties).
    Ranking groups by it instead of by their best task is the consolidation order (`prefix_bound`)."""
    return sum([value_of(rid) for rid in group]), len(group)


def prefix_bound(locked_tokens: int, pool_tokens: int, share: float) -> bool:
    """The batch is bound by prefixes: those locked by running calls take more than `share` of the pool."""
    return locked_tokens > share * pool_tokens
