"""Shared test fixtures: a cheap latency model, hand-built traces, a sim runner, the run
invariants and a decision recorder. Test modules import helpers from here, never from each other."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest
from hypothesis import settings

from topas.engines.latency.base import LatencyModel
from topas.engines.latency.costs import LatencyCostModel
from topas.engines.sim.config import SimEngineConfig
from topas.engines.sim.engine import SimEngine
from topas.engines.sim.records import sim_record
from topas.policy import Policy, RequestFinished, create_policy
from topas.workflow import Agent, CallNode, SegmentRef, Task, Trace, Workflow, template_of

# the same examples on every run: CI is reproducible; explore more with --hypothesis-profile=explore
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=500)
settings.load_profile("ci")


class LinearLatency(LatencyModel):
    """Deterministic toy latency: 0.1 ms per prefill token, 20 ms + 0.1 ms per request per decode step."""

    def prefill(self, batch: Sequence[tuple[int, int]]) -> float:
        return 0.005 + 1e-4 * sum(e for e, _ in batch)

    def decode(self, batch_size: int, mean_context: int) -> float:
        return 0.02 + 1e-4 * batch_size + 1e-7 * batch_size * mean_context


def engine_config(**kw) -> SimEngineConfig:
    base = dict(kv_pool_tokens=20000, max_running_requests=64, chunked_prefill_size=2048, max_prefill_tokens=4096,
                host_cache_ratio=2.0, kv_bytes_per_token=1024, host_link_gbs=10.0)
    base.update(kw)
    return SimEngineConfig(**base)


def chain_workflow(name: str = "chain", agents: Sequence[tuple[str, int]] = (("a", 500), ("b", 800), ("c", 300)),
                   inp: int = 100, out: int = 50) -> Workflow:
    ags = {n: Agent(n, p) for n, p in agents}
    nodes = {}
    prev = None
    for n, _ in agents:
        nodes[n] = CallNode(n, n, inp, out, deps=(prev,) if prev else (), history=(SegmentRef("out", prev),) if prev else ())
        prev = n
    return Workflow(name, ags, nodes)


def make_trace(workflows: Sequence[Workflow], arrivals: Sequence[float], name: str = "t") -> Trace:
    tasks = tuple(Task(i, a, wf, wf.name) for i, (wf, a) in enumerate(zip(workflows, arrivals)))
    templates = {wf.name: template_of(wf) for wf in workflows}
    return Trace(name, tasks, templates)


def random_agents(rng: random.Random, n_agents: int) -> dict[str, Agent]:
    return {f"ag{i}": Agent(f"ag{i}", rng.randint(50, 2000)) for i in range(n_agents)}


def random_dag(rng: random.Random, n_nodes: int, agents: dict[str, Agent], name: str) -> Workflow:
    n_agents = len(agents)
    nodes = {}
    for i in range(n_nodes):
        deps = tuple(sorted({f"n{j}" for j in range(i) if rng.random() < 0.4}))
        hist = tuple(SegmentRef("out", d) for d in deps[:2])
        nodes[f"n{i}"] = CallNode(f"n{i}", f"ag{rng.randrange(n_agents)}", rng.randint(1, 400), rng.randint(1, 200),
                                  deps=deps, history=hist)
    return Workflow(name, agents, nodes)


def run_sim(trace: Trace, policy: Policy | str = "fcfs", **cfg_kw) -> SimEngine:
    cfg = engine_config(**cfg_kw)
    lat = LinearLatency()
    pol = create_policy(policy) if isinstance(policy, str) else policy
    eng = SimEngine(cfg, lat, pol, trace, LatencyCostModel(lat, cfg.kv_bytes_per_token, cfg.host_link_gbs, cfg.host_link_latency_s))
    eng.run()
    return eng


@pytest.fixture
def linear_latency() -> LinearLatency:
    return LinearLatency()


def req_info(rid: str, agent: str = "a", task_id: int = 0, cached: int = 0, prompt: int = 1000, prefix: int = 500,
             ready: float = 0.0, arrival: float = 0.0, segments=None, stage: str | None = None, generated: int = 0):
    from topas.policy import RequestInfo

    node = rid.split(":")[-1]
    segs = segments if segments is not None else ((f"agent:{agent}", prefix), (f"t{task_id}:{node}:in", prompt - prefix))
    return RequestInfo(rid=rid, task_id=task_id, node=node, stage=stage or node, agent=agent, task_arrival=arrival,
                       ready_time=ready, prompt_tokens=prompt, prefix_tokens=prefix, cached_tokens=cached,
                       generated_tokens=generated, segments=segs)


def make_view(waiting=(), running=(), tasks=None, templates=None, prefixes=None, now: float = 0.0, kv: int = 30000,
              used: int = 0, evictable: int = 0):
    from topas.policy import SchedulerView

    lat = LinearLatency()
    return SchedulerView(now=now, waiting=tuple(waiting), running=tuple(running), tasks=tasks or {},
                         templates=templates or {}, prefixes=prefixes or {}, kv_pool_tokens=kv,
                         kv_used_tokens=used, kv_evictable_tokens=evictable, host_capacity_tokens=2 * kv,
                         host_used_tokens=0, max_running_requests=256,
                         costs=LatencyCostModel(lat, 262144, 24.0, 5e-6))


def check_run(e: SimEngine):
    """Invariants every run must satisfy; returns the run's record."""
    trace = e.trace
    rec = sim_record(e, 0.0)
    req = rec.requests
    n_nodes = sum(len(t.workflow.nodes) for t in trace.tasks)
    # every request finishes exactly once
    assert len(req) == n_nodes and req["rid"].is_unique and req["finish"].notna().all()
    # DAG precedence: a call is issued only after all its dependencies finished (+ tool gap)
    fin = dict(zip(req["rid"], req["finish"]))
    ready = dict(zip(req["rid"], req["ready"]))
    for t in trace.tasks:
        for n in t.workflow.nodes.values():
            for d in n.deps:
                assert ready[f"{t.task_id}:{n.id}"] >= fin[f"{t.task_id}:{d}"] + n.gap_s - 1e-12
    # exact output lengths; prefill before first token before finish
    out = {f"{t.task_id}:{n.id}": n.output_tokens for t in trace.tasks for n in t.workflow.nodes.values()}
    assert all(req["output_tokens"] == req["rid"].map(out))
    assert (req["first_token"] >= req["first_admit"]).all() and (req["finish"] >= req["first_token"]).all()
    # the KV pool is never exceeded
    assert rec.timeline["kv_used_tokens"].max() <= e.cfg.kv_pool_tokens
    e.cache.check_invariants()
    assert e.pool.private == 0
    # JCT = last call's finish - arrival
    last = req.groupby("task_id")["finish"].max()
    assert (rec.tasks.set_index("task_id")["finish"] - last).abs().max() < 1e-9
    return rec


class Recorder(Policy):
    """Wraps a policy; records every decision with the time it was taken."""

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.decisions: list[tuple[float, object]] = []
        self.finished: list[float] = []

    def on_event(self, event) -> None:
        if isinstance(event, RequestFinished):
            self.finished.append(event.time)
        self.inner.on_event(event)

    def schedule(self, view):
        d = self.inner.schedule(view)
        self.decisions.append((view.now, d))
        return d


def lengthen_outputs(trace: Trace, tasks: set[int], extra: int) -> Trace:
    """The same trace with `extra` more true output tokens on every call of the given tasks."""
    tasks_out = []
    for t in trace.tasks:
        if t.task_id in tasks:
            wf = t.workflow
            nodes = {k: dataclasses.replace(n, output_tokens=n.output_tokens + extra) for k, n in wf.nodes.items()}
            t = dataclasses.replace(t, workflow=Workflow(wf.name, wf.agents, nodes))
        tasks_out.append(t)
    return dataclasses.replace(trace, tasks=tuple(tasks_out))
