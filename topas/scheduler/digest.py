"""Digests of the view that TOPAS builds its search problem from (tasks.py, problem_builder.py).

A decision runs after every event, so these are written for speed: every waiting and running
call is read once, and a task's remaining calls come from a per-template table. The values are
those of `topas.policy.progress` (`active_stage_counts`, `remaining_calls`), in the same order.
`TaskDigest` keeps one task's derived inputs across decisions while the task does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topas.policy import RequestInfo, SchedulerView, TaskProgress
from topas.workflow import WorkflowTemplate


@dataclass(frozen=True)
class StageTable:
    """A template's stages in template order, read once per template instead of once per task."""

    stages: tuple[tuple[str, float], ...]  # (stage id, expected count)
    agent: Mapping[str, str]  # stage -> agent
    in_id_order: bool  # template order is id order: a task's remaining calls are already sorted

    @classmethod
    def of(cls, tpl: WorkflowTemplate) -> StageTable:
        ids = [s.id for s in tpl.stages.values()]
        return cls(tuple((s.id, s.expected_count) for s in tpl.stages.values()),
                   {s.id: s.agent for s in tpl.stages.values()}, ids == sorted(ids))


def group_calls(view: SchedulerView) -> tuple[dict[int, list[RequestInfo]], dict[int, list[RequestInfo]]]:
    """Waiting and running calls per task, in view order."""
    waiting: dict[int, list[RequestInfo]] = {}
    running: dict[int, list[RequestInfo]] = {}
    for by_task, rs in ((waiting, view.waiting), (running, view.running)):
        for r in rs:
            lst = by_task.get(r.task_id)
            if lst is None:
                by_task[r.task_id] = [r]
            else:
                lst.append(r)
    return waiting, running


def active_counts(waiting_counts: dict[str, int], running: Sequence[RequestInfo] | None) -> dict[str, int]:
    """One task's waiting + running calls per stage (`active_stage_counts`), from its waiting counts."""
    if not running:
        return waiting_counts
    out = dict(waiting_counts)
    for r in running:
        out[r.stage] = out.get(r.stage, 0) + 1
    return out


def remaining(table: StageTable, prog: TaskProgress, active: Mapping[str, int]) -> dict[str, float]:
    """`remaining_calls`: max(expected - finished, active now, 0) per stage (max keeps the first of equals;
    an absent active count is 0, which the clamp covers)."""
    done = prog.stage_done
    out = {}
    for s, expected in table.stages:
        n = expected - done.get(s, 0)
        a = active.get(s)
        if a is not None and a > n:
            n = float(a)
        if 0.0 > n:
            n = 0.0
        out[s] = n
    return out


def sorted_items(table: StageTable, rem: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """tuple(sorted(rem.items())) for remaining calls of this template (one entry per stage)."""
    return tuple(rem.items()) if table.in_id_order else tuple(sorted(rem.items()))


def stage_counts(rs: Sequence[RequestInfo]) -> dict[str, int]:
    """Calls per stage (as a Counter of their stages, without the Counter)."""
    out: dict[str, int] = {}
    for r in rs:
        out[r.stage] = out.get(r.stage, 0) + 1
    return out


class StateKeyHead(tuple):
    """A cache key a digest reuses at every decision, hashed once: the (template, remaining, waiting, running)
    part of a task state's key, or a task's remaining calls (equal keys are equal as plain tuples)."""

    def __init__(self, items) -> None:
        self._hash = tuple.__hash__(self)

    def __hash__(self) -> int:
        return self._hash


class TaskDigest:
    """One task's remaining calls, active and waiting counts per stage, reuse counts n_a, state-key head
    and admission chains, valid while `sig` holds: its progress, its waiting calls and
    its running calls' stages and residual buckets."""

    __slots__ = ("sig", "remaining", "active", "waiting", "reuse", "head", "state", "bases", "stage_rids", "forms", "chain_state",
                 "chains", "victims", "remaining_s", "remaining_key")

    def __init__(self, sig: tuple, remaining: dict, active: dict, waiting: dict, reuse: tuple[tuple[str, int], ...]) -> None:
        self.sig, self.remaining, self.active, self.waiting, self.reuse = sig, remaining, active, waiting, reuse
        self.head: tuple | None = None  # (template, remaining, waiting, running) part of the state key
        self.state: tuple | None = None  # (key tail, the task-state cache entry that key found)
        self.bases: dict[tuple, tuple] = {}  # (coarse step, epoch) -> the W-free part of its states
        self.stage_rids: dict[str, list[str]] | None = None  # waiting rids per stage, by ready time
        self.forms: dict[frozenset[str], tuple[dict, frozenset]] = {}  # eligible agents -> (calls per stage, as a key)
        self.chain_state = None  # the task state `chains` were built for
        self.chains: dict[frozenset[str], tuple] = {}  # eligible -> (chain cache key, chain, [(rid, gain)])
        self.victims: dict[str, tuple[tuple, float]] = {}  # running rid -> (key tail, gain of re-admitting it)
        self.remaining_s: tuple[tuple, float] | None = None  # ((step, estimates observed), its remaining service)
        self.remaining_key: tuple | None = None  # (template, remaining calls per stage): what remaining_s is a function of
