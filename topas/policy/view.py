"""What a policy sees at a scheduling point (engine-neutral, read-only).

Deliberately absent: a call's true output length, its `max_new_tokens`, realized
future nodes of a task, and future arrivals (docs/policy_contract.md). A policy that
needs output lengths learns them online from `RequestFinished` events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from topas.workflow import WorkflowTemplate


class Residency(str, Enum):
    GPU = "gpu"
    HOST = "host"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """One LLM call, waiting (ready, not admitted) or running (admitted)."""

    rid: str
    task_id: int
    node: str
    stage: str
    agent: str
    task_arrival: float
    ready_time: float  # when the call entered the waiting queue (first time)
    prompt_tokens: int
    prefix_tokens: int  # the agent prefix part of the prompt
    cached_tokens: int = 0  # prompt tokens matched on device now (simulator: SGLang's uncapped match, may be all)
    host_cached_tokens: int = 0  # further prompt tokens matched on the host tier
    generated_tokens: int = 0  # running: tokens generated so far
    preemptions: int = 0  # times retracted / preempted so far
    admitted_time: float | None = None  # running: when (last) admitted
    # Prompt composition: (segment id, tokens) in order; equal ids = identical tokens
    # (docs/workflow_model.md). Lets a policy see which requests share a prefix.
    segments: tuple[tuple[str, int], ...] = ()
    # The device-cached prefix as the engine's cache-tree nodes, root first: one key per node,
    # ordering it among its siblings as the engine's tree does (SGLang: child insertion order).
    # Empty when the engine does not expose its tree (policies then use `segments`).
    cached_nodes: tuple[int, ...] = ()

    @property
    def dynamic_kv_tokens(self) -> int:
        """d_r(t): KV the request holds beyond the shared agent prefix."""
        return self.prompt_tokens - self.prefix_tokens + self.generated_tokens

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True, slots=True)
class TaskProgress:
    """Realized progress of one task: what has finished, runs, waits. Not its future nodes."""

    task_id: int
    template: str
    arrival: float
    finished_nodes: tuple[str, ...] = ()
    stage_done: Mapping[str, int] = field(default_factory=dict)  # finished calls per stage
    running: tuple[str, ...] = ()  # rids
    waiting: tuple[str, ...] = ()  # rids
    attained_service: float = 0.0  # seconds of engine time received by its finished + running calls


@dataclass(frozen=True, slots=True)
class PrefixState:
    """Residency of one agent's static prefix."""

    agent: str
    tokens: int
    device_tokens: int
    host_tokens: int
    pinned: bool  # kept resident by the current policy decision
    in_use: bool  # referenced by a running request (cannot be evicted now)

    @property
    def residency(self) -> Residency:
        if self.device_tokens >= self.tokens:
            return Residency.GPU
        if self.host_tokens >= self.tokens:
            return Residency.HOST
        return Residency.NONE


class CostModel(Protocol):
    """Engine cost estimates a policy may use (seconds), from the engine's latency model."""

    bytes_per_token: int  # KV bytes per token (mu)

    def prefill_time(self, extend_tokens: int, prefix_tokens: int = 0) -> float: ...

    def decode_step_time(self, batch_size: int, mean_context: int) -> float: ...

    def swap_time(self, tokens: int) -> float:
        """Host<->GPU transfer of `tokens` of KV: latency + bytes / (efficiency x bandwidth)."""
        ...


@dataclass(frozen=True)
class SchedulerView:
    now: float
    waiting: tuple[RequestInfo, ...]  # ready, not admitted; in ready (FCFS) order
    running: tuple[RequestInfo, ...]  # admitted (prefilling or decoding)
    tasks: Mapping[int, TaskProgress]
    templates: Mapping[str, WorkflowTemplate]
    prefixes: Mapping[str, PrefixState]  # by agent
    kv_pool_tokens: int  # B: device KV pool
    kv_used_tokens: int  # cached tree + running requests' private KV
    kv_evictable_tokens: int  # cached, unlocked: reclaimable on demand
    host_capacity_tokens: int
    host_used_tokens: int
    max_running_requests: int
    costs: CostModel

    @property
    def kv_free_tokens(self) -> int:
        return self.kv_pool_tokens - self.kv_used_tokens

    def request(self, rid: str) -> RequestInfo:
        for r in self.waiting:
            if r.rid == rid:
                return r
        for r in self.running:
            if r.rid == rid:
                return r
        raise KeyError(rid)
