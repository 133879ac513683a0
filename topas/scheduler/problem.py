"""The data that flows through TOPAS's decision pipeline (docs/topas.md, "The pipeline"):

    estimates -> Problem (the scored calls, the agent options, the KV pool) -> candidate states (Plan)
    -> the chosen Plan -> admission order -> pins

A `Problem` is one decision's search problem: the device KV pool B (`kv_pool_tokens`), the kept running requests' KV, every agent of
the active pool as an `AgentOption`, the scored waiting calls (agent, task, d_r) and each task's admission
chain, and the preemption candidates (`RunningOption`, built on demand). A `Plan` is a candidate
post-decision state (R', Q') with its `ScoreBreakdown`, every term of the score that score.py computes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

Chain = Sequence[tuple[str, float]]  # [(rid, age-weighted marginal gain)] of one task, in admission order


class Head(NamedTuple):
    """A scored task's first call: what the memory an opened prefix takes would otherwise serve (J_hold)."""
    rid: str
    agent: str
    tokens: int
    gain: float  # its age-weighted gain
    service_s: float


class AgentOption(NamedTuple):  # a tuple: built for every agent at every decision
    name: str
    tokens: int  # l_a
    forced: bool  # a kept running request uses it: it stays resident
    on_gpu: bool
    move_in_s: float  # 0 on GPU; else the transfer time of its bytes (J_move)
    reuse_n: int  # one-hop downstream stages about to become ready (V_reuse)
    reload_s: float  # seconds to bring the prefix back later (V_reuse unit)


@dataclass(slots=True)
class RunningOption:
    """A preemption candidate: its J_redo (known) and J_revoke (computed on first use: it may read the path
    model), the margin that hysteresis adds, and a cheap proxy the candidates are tried in (lower first)."""

    rid: str
    task_id: int
    tokens: int  # KV freed by preempting it
    redo_s: float
    revoke_s: float | Callable[[], float]
    margin: float = 0.0  # preempt_margin: the cost is (1 + margin) x (redo + revoke)
    order_key: float = 0.0
    lower_s: float = 0.0  # a lower bound of cost(), known without computing J_revoke

    def revoke(self) -> float:
        if callable(self.revoke_s):
            self.revoke_s = self.revoke_s()
        return self.revoke_s

    def cost(self) -> float:
        return (self.redo_s + self.revoke()) * (1.0 + self.margin)


class Candidates(Sequence):
    """Preemption candidates in trial order (`order_key`, ties in given order), each built on first access:
    a repair usually reads the first one or two of them only."""

    def __init__(self, keys: Sequence[float], build: Callable[[int], RunningOption]) -> None:
        self._order = sorted(range(len(keys)), key=keys.__getitem__)  # stable, as sorting the options
        self._build = build
        self._made: dict[int, RunningOption] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, i: int) -> RunningOption:
        opt = self._made.get(i)
        if opt is None:
            opt = self._made[i] = self._build(self._order[i])
        return opt


class ScoreBreakdown(NamedTuple):  # a tuple: built for every candidate state
    """Every term of a state's score (seconds). `j_admit` carries each task's weight (aging x remaining-work
    factor); `aging` is the part of it that aging adds (over the plain path drops of the admitted calls),
    `remaining_work` the part the remaining-work factor adds or takes off (score.remaining_work) and `context` the
    part the admitted calls' cached context adds (score.context_value). `j_hold`: the opening cost."""

    j_admit: float = 0.0
    aging: float = 0.0
    remaining_work: float = 0.0
    context: float = 0.0
    j_hold: float = 0.0
    j_move: float = 0.0
    v_reuse: float = 0.0
    j_redo: float = 0.0
    j_revoke: float = 0.0
    margin: float = 0.0  # preempt_margin x (J_redo + J_revoke): hysteresis against preemption thrash

    @property
    def total(self) -> float:
        return self.j_admit - self.j_move + self.v_reuse - (self.j_redo + self.j_revoke + self.margin) - self.j_hold


@dataclass
class Problem:
    kv_pool_tokens: int  # B, the device KV pool (the view's kv_pool_tokens)
    base_tokens: int  # KV of the running requests that are kept
    agents: Mapping[str, AgentOption]
    request_agent: Mapping[str, str]
    request_task: Mapping[str, int]
    request_tokens: Mapping[str, int]  # d_r of each scored waiting request
    task_agents: Mapping[int, frozenset[str]]  # agents of each scored task's waiting requests
    chain: Callable[[int, frozenset[str]], Chain]  # the task's admission chain for eligible agents
    swap_s_per_token: float
    max_actions: int  # K
    beta: float = 1.0  # V_reuse weight (0: the term is off)
    task_aging: Mapping[int, float] = field(default_factory=dict)  # each scored task's weight: g_i(t) x f_i
    task_remaining_work: Mapping[int, float] = field(default_factory=dict)  # its remaining-work factor f_i (1: none)
    context_s: Mapping[str, float] = field(default_factory=dict)  # each scored call's context value (in its chain's gains)
    running: Callable[[], Sequence[RunningOption]] | None = None  # preemption candidates, computed on demand
    overdue: frozenset[int] = frozenset()  # tasks with a call waiting well beyond W: scored outside R' too
    hot: frozenset[str] = frozenset()  # scored calls with a cached context beyond their agent prefix on the device
    # J_hold's inputs, built on first use (a state that opens no agent needs none): the expected service seconds
    # of each scored call, and each scored task's first call by gain per token (what opened memory displaces).
    # Called with the problem: a closure over it would be a reference cycle, which leaves every decision's
    # objects to the cyclic garbage collector (its pauses were most of a decision's p99)
    opening: Callable[[Problem], tuple[Mapping[str, float], Sequence[Head]]] | None = None
    # per decision: tasks grouped by their agents, each group's first calls per R' pattern (pack._heads), the
    # blocked calls whose repair failed, rid -> (gain, smallest memory shortfall seen), and memos of the score
    _victims: Sequence[RunningOption] | None = field(default=None, init=False, repr=False)
    _groups: dict[frozenset[str], list[int]] | None = field(default=None, init=False, repr=False)
    _group_heads: dict[tuple, list] = field(default_factory=dict, init=False, repr=False)
    _repair_fails: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)
    _agent_terms: tuple | None = field(default=None, init=False, repr=False)
    _min_tokens: int | None = field(default=None, init=False, repr=False)
    _agent_waiting: dict[str, int] | None = field(default=None, init=False, repr=False)
    _opening: tuple | None = field(default=None, init=False, repr=False)

    def opening_inputs(self) -> tuple[Mapping[str, float], Sequence[Head]]:
        if self._opening is None:
            self._opening = self.opening(self) if self.opening is not None else ({}, ())
        return self._opening

    def min_tokens(self) -> int:
        """The smallest d_r of a scored call: a state with less room left admits nothing more."""
        if self._min_tokens is None:
            self._min_tokens = min(self.request_tokens.values(), default=0)
        return self._min_tokens

    def waiting_tokens(self) -> dict[str, int]:
        """Sum of d_r of the scored waiting calls per agent."""
        if self._agent_waiting is None:
            self._agent_waiting = {}
            for rid, a in self.request_agent.items():
                self._agent_waiting[a] = self._agent_waiting.get(a, 0) + self.request_tokens[rid]
        return self._agent_waiting

    def forced(self) -> frozenset[str]:
        return frozenset(a for a, o in self.agents.items() if o.forced)

    def victims(self) -> Sequence[RunningOption]:
        """Preemption candidates, cheapest per freed token first (computed once per decision)."""
        if self._victims is None:
            opts = self.running() if self.running else ()
            self._victims = opts if isinstance(opts, Candidates) else sorted(opts, key=lambda r: r.order_key)
        return self._victims

    def agent_terms(self) -> tuple[list[tuple[str, int]], dict[str, tuple[int, float]]]:
        """(agent, l_a) of the prefixes on the GPU, and (n_a, reload seconds) per agent: read by every score."""
        if self._agent_terms is None:
            self._agent_terms = ([(a, o.tokens) for a, o in self.agents.items() if o.on_gpu],
                                 {a: (o.reuse_n, o.reload_s) for a, o in self.agents.items()})
        return self._agent_terms


@dataclass
class Plan:
    """A candidate post-decision state: R', the admitted calls with their gains, the preempted calls, the
    calls refused for lack of memory, the KV it holds and its score (`ScoreBreakdown.total`)."""

    resident: frozenset[str]
    admit: list[str]
    gains: dict[str, float]
    memory: int
    breakdown: ScoreBreakdown
    blocked: list[tuple[float, str]] = field(default_factory=list)  # (gain, rid) refused for lack of memory
    preempt: list[RunningOption] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.breakdown.total

    @property
    def preempt_rids(self) -> list[str]:
        return [r.rid for r in self.preempt]
