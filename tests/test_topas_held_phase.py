"""TOPAS's held phase (docs/topas.md, "Held phases"): while a running agent's call whose context is cached on the
device waits for memory, no other agent's prefix opens and no overdue call outside R' is admitted."""

from __future__ import annotations

import dataclasses

from conftest import make_view, req_info

from topas.policy import PrefixState, TaskProgress, create_policy
from topas.scheduler.search import holds_phase
from topas.workflow import Agent, TemplateStage, WorkflowTemplate


def _view(history_cached: bool):
    """A conversation of agent w (turns T1, T2) and a reviewer r. Task 1's T1 runs (w's prefix is locked); task 2's
    T2, with 14,000 tokens of history, does not fit beside it; task 0, the oldest, waits on its last call R, which
    fits if r's prefix opens. `history_cached`: T2's history is on the device (else only w's prefix is)."""
    agents = {"w": Agent("w", 6000), "r": Agent("r", 3000)}
    stages = {"T1": TemplateStage("T1", "w"), "T2": TemplateStage("T2", "w", ("T1",)), "R": TemplateStage("R", "r", ("T2",))}
    tpl = WorkflowTemplate("conv", agents, stages)
    t2 = req_info("2:T2", "w", 2, stage="T2", arrival=20.0, ready=90.0, prompt=20_000, prefix=6000,
                  cached=20_000 - 500 if history_cached else 6000)
    r0 = req_info("0:R", "r", 0, stage="R", arrival=0.0, ready=10.0, prompt=3500, prefix=3000, cached=3000)
    t1 = dataclasses.replace(req_info("1:T1", "w", 1, stage="T1", arrival=80.0, ready=80.0, prompt=6500, prefix=6000,
                                      cached=6000), generated_tokens=10, admitted_time=80.0)
    tasks = {0: TaskProgress(0, "conv", 0.0, stage_done={"T1": 1, "T2": 1}, waiting=("0:R",)),
             1: TaskProgress(1, "conv", 80.0, running=("1:T1",)),
             2: TaskProgress(2, "conv", 20.0, stage_done={"T1": 1}, waiting=("2:T2",))}
    prefixes = {"w": PrefixState("w", 6000, 6000, 0, pinned=False, in_use=True),
                "r": PrefixState("r", 3000, 3000, 0, pinned=False, in_use=False)}
    return make_view([t2, r0], [t1], tasks=tasks, templates={"conv": tpl}, prefixes=prefixes, now=100.0, kv=20_000)


def test_a_blocked_turn_with_its_history_cached_holds_the_phase_and_the_overdue_call_waits_behind_it():
    d = create_policy("topas").schedule(_view(history_cached=True))
    assert d.admit[0] == "2:T2" and d.stop_at_first_misfit  # the engine waits for the turn: nothing passes it


def test_without_a_cached_history_the_overdue_call_opens_its_agent():
    d = create_policy("topas").schedule(_view(history_cached=False))
    assert d.admit[0] == "0:R"


def test_holds_phase_reads_only_blocked_calls_of_running_agents_with_a_cached_context():
    from topas.scheduler.problem import AgentOption, Plan, Problem, ScoreBreakdown

    agents = {"w": AgentOption("w", 6000, True, True, 0.0, 0, 0.1), "r": AgentOption("r", 3000, False, True, 0.0, 0, 0.1)}
    p = Problem(kv_pool_tokens=20_000, base_tokens=0, agents=agents, request_agent={"t2": "w", "r0": "r"},
                request_task={"t2": 2, "r0": 0}, request_tokens={"t2": 14_000, "r0": 500}, task_agents={},
                chain=lambda t, e: [], swap_s_per_token=1e-5, max_actions=64, hot=frozenset({"t2", "r0"}))
    forced = frozenset({"w"})
    blocked = lambda *rids: Plan(forced, [], {}, 0, ScoreBreakdown(), [(1.0, rid) for rid in rids])  # noqa: E731
    assert holds_phase(p, forced, blocked("t2"))
    assert not holds_phase(p, forced, blocked("r0"))  # r has no running call: its blocked call holds nothing
    assert not holds_phase(p, forced, blocked())
    assert not holds_phase(dataclasses.replace(p, hot=frozenset({"r0"})), forced, blocked("t2"))


def test_a_running_agents_admitted_call_with_cached_context_is_listed_ahead_of_an_opened_agents_group():
    """The plan admits both; listed behind the opened agent's group, the engine could stop at a misfit before the
    cached call and its context would be evicted while it waits (docs/decisions/0056). Calls without a cached
    context, calls of agents with no running call and calls the plan does not admit keep their places."""
    from topas.scheduler.ordering import cached_contexts_first
    from topas.scheduler.problem import AgentOption, Problem

    agents = {"run": AgentOption("run", 1000, True, True, 0.0, 0, 0.1),
              "new": AgentOption("new", 1000, False, False, 0.1, 0, 0.1)}
    request_agent = {"1:n": "new", "2:n": "new", "3:r": "run", "4:r": "run", "5:n": "new"}
    problem = Problem(kv_pool_tokens=30_000, base_tokens=0, agents=agents, request_agent=request_agent,
                      request_task={rid: int(rid[0]) for rid in request_agent}, request_tokens={r: 500 for r in request_agent},
                      task_agents={}, chain=lambda t, e: [], swap_s_per_token=1e-5, max_actions=64,
                      hot=frozenset({"4:r", "5:n"}))
    listed = ["1:n", "2:n", "3:r", "4:r", "5:n"]
    assert cached_contexts_first(listed, problem, admit=listed) == ["4:r", "1:n", "2:n", "3:r", "5:n"]
    assert cached_contexts_first(listed, problem, admit=["1:n", "2:n", "3:r"]) == listed  # not admitted: in place
