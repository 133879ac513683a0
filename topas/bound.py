"""Each task's distance from the physical limit: a floor on its JCT from the run's own latency model.

The floor of a task is its batch-1 critical path (docs/bound.md): every call alone on the server,
started the moment its dependencies finish (plus its client gap), with the most of its prompt
cached that any schedule could leave there, along the DAG's longest path:

    floor(call) = prefill(uncached part, after the cached part) + (output - 1) x decode(batch 1, prompt + 1)
    finish(call) = max(finish of its dependencies, task arrival) + gap + floor(call)
    bound(task) = max finish - arrival

- Cached part: the agent's prefix (an earlier call of that agent left it), or the longest leading run
  of the prompt that another call of the same task with the same agent, not downstream of it, leaves
  in the cache (its prompt and output but the last token, as SGLang keeps them); never the whole
  prompt (SGLang computes at least one token). Other tasks' segments never match (they carry the task id).
- Prefill: one iteration for the uncached part, or the same split at the engine's chunk size,
  whichever is cheaper (a latency table need not be super-additive).
- Decode: every step priced at the call's first decode step, the shortest context: a step's cost
  grows with the context and the batch, so no batch and no stretch of steps the engine prices is
  cheaper.

It ignores queueing, batching, memory pressure (evictions, swaps, retraction) and the client path:
each only adds time, so no schedule beats the bound (tests/test_bound.py checks it on every workload
and scheduler). Computed after a run from the trace and a `CostModel`; it changes no simulated number.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import networkx as nx
import pandas as pd

from topas.policy.view import CostModel
from topas.workflow import Segment, SegmentRef, Task, Trace, Workflow, task_segment_id

log = logging.getLogger("topas")


def _shared_tokens(a: Sequence[Segment], b: Sequence[Segment]) -> int:
    """Tokens of the longest common leading run of two segment lists (token-exact, as the radix cache)."""
    n = 0
    for x, y in zip(a, b):
        if x.id != y.id:
            break
        n += min(x.tokens, y.tokens)
        if x.tokens != y.tokens:
            break
    return n


def cacheable_tokens(wf: Workflow, task_id: int, node_id: str) -> int:
    """The most prompt tokens any schedule can find cached when the call is admitted (module doc)."""
    prompt = wf.prompt_segments(task_id, node_id)
    agent = wf.nodes[node_id].agent
    downstream = nx.descendants(wf.graph, node_id)
    best = prompt[0].tokens  # the agent's prefix
    for other, node in wf.nodes.items():
        if other == node_id or other in downstream or node.agent != agent:
            continue
        out = Segment(task_segment_id(task_id, SegmentRef("out", other)), node.output_tokens - 1)
        best = max(best, _shared_tokens(prompt, (*wf.prompt_segments(task_id, other), out)))
    return min(best, sum(s.tokens for s in prompt) - 1)


def prefill_floor_s(costs: CostModel, extend: int, cached: int, chunk: int | None = None) -> float:
    """`extend` new tokens after `cached` ones: one iteration, or chunks of `chunk`, the cheaper."""
    whole = costs.prefill_time(extend, cached)
    if not chunk or extend <= chunk:
        return whole
    split = sum(costs.prefill_time(min(chunk, extend - done), cached + done) for done in range(0, extend, chunk))
    return min(whole, split)


def call_floor_s(wf: Workflow, task_id: int, node_id: str, costs: CostModel, chunk: int | None = None) -> float:
    """One call alone on the server: its prefill (uncached part) and its decode steps."""
    prompt = wf.prompt_tokens(node_id)
    cached = cacheable_tokens(wf, task_id, node_id)
    steps = wf.nodes[node_id].output_tokens - 1  # the prefill yields the first token
    decode = steps * costs.decode_step_time(1, prompt + 1) if steps > 0 else 0.0
    return prefill_floor_s(costs, prompt - cached, cached, chunk) + decode


def task_bound_s(task: Task, costs: CostModel, chunk: int | None = None) -> float:
    """The task's batch-1 critical path, client gaps included (seconds from its arrival)."""
    wf = task.workflow
    finish: dict[str, float] = {}
    for n in wf.topo_order:
        node = wf.nodes[n]
        start = max((finish[d] for d in node.deps), default=0.0) + node.gap_s
        finish[n] = start + call_floor_s(wf, task.task_id, n, costs, chunk)
    return max(finish.values())


def trace_bounds(trace: Trace, costs: CostModel, chunk: int | None = None) -> dict[int, float]:
    """task id -> its bound (s)."""
    return {t.task_id: task_bound_s(t, costs, chunk) for t in trace.tasks}


def with_bounds(tasks: pd.DataFrame, bounds: dict[int, float]) -> pd.DataFrame:
    """tasks.parquet with `bound_s` and `jct_over_bound` filled in (topas/results.py declares them)."""
    b = tasks["task_id"].map(bounds).astype(float)
    return tasks.assign(bound_s=b, jct_over_bound=tasks["jct"] / b)


# ---- the run's own latency model ---------------------------------------------------------------


@lru_cache(maxsize=8)
def _cost_model(kind: str, profile: str | None, model: Any, gpu: Any) -> CostModel:
    """The latency model a run used, built once per process (aiconfigurator takes ~1 s the first time)."""
    from topas.engines.latency.costs import LatencyCostModel
    from topas.engines.latency.factory import build_latency_model

    lat = build_latency_model(kind, model, gpu, **({"path": profile} if kind == "profile" else {}))
    return LatencyCostModel(lat, model.kv_bytes_per_token, gpu.host_link_gbs, gpu.host_link_latency_s)


class NoBound(Exception):
    """The run has no latency model of its own to bound it with."""


def run_inputs(backend: Any, model: Any, gpu: Any, trace: Trace, engine: dict[str, Any]) -> tuple[Trace, CostModel, int | None]:
    """(trace as the engine replayed it, its latency model, its prefill chunk size) for one run.
    The simulator: its `backend.latency`. A real engine on a GPU: the trace scaled as it was replayed
    and the predictor its policy's cost model is fitted from (`backend.latency`): there the bound is
    the model's estimate of the limit, not a guaranteed floor. A real engine on the CPU: none (its
    tiny model's latency is only measured by `make fidelity`)."""
    chunk = getattr(backend, "chunked_prefill_size", None)
    if getattr(backend, "name", "sim") == "sim":
        return trace, _cost_model(backend.latency, backend.latency_profile, model, gpu), chunk
    if engine.get("profile") == "cpu":
        raise NoBound("a real server on the CPU has no latency model in the run's config")
    from topas.workloads.scaling import scale_trace

    scaled = scale_trace(trace, float(engine.get("token_scale") or 1.0), float(engine.get("time_scale") or 1.0))
    return scaled, _cost_model(getattr(backend, "latency", "auto"), None, model, gpu), chunk


def add_bounds(record: Any, backend: Any, model: Any, gpu: Any, trace: Trace) -> Any:
    """The run record with each task's bound (tasks.parquet `bound_s`, `jct_over_bound`). Without one
    (a real engine, see `run_inputs`) the columns stay NaN and the log says why: the measurement stands."""
    try:
        replayed, costs, chunk = run_inputs(backend, model, gpu, trace, record.engine)
    except Exception as e:  # noqa: BLE001
        if getattr(backend, "name", "sim") == "sim":
            raise  # the simulator's own model: a failure here is a bug
        log.warning(f"no JCT bound for this run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return record
    return replace(record, tasks=with_bounds(record.tasks, trace_bounds(replayed, costs, chunk)))
