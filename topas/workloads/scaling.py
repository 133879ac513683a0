"""Scale a workload trace down (tokens) or stretch it (time) for a small model.

The workloads are sized for 7-32B models on 80-141 GB GPUs (agent prefixes of thousands
of tokens); the tiny CPU model has a 4096-token context and a 4096-token KV pool.
`scale_trace(trace, token_scale)` multiplies every agent prefix, fresh-input and output
length by `token_scale` (rounded, at least 1 token), keeping the DAG, the segment
structure (so prefix reuse follows the same rule) and the templates; `time_scale`
multiplies arrival times and client gaps. The scaled trace is what is replayed and
what the run's records report.

`auto_token_scale` picks the largest factor of a 1-2-5 series (1, 0.5, 0.2, 0.1, ...)
with which the largest call (prompt + output) fits the model's context and a quarter
of the KV pool (so at least four calls can run side by side); 1 when it already fits.
"""

from __future__ import annotations

import math
from dataclasses import replace

from topas.workflow import Agent, Task, Trace, Workflow, WorkflowTemplate

SCALES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)
POOL_SHARE = 4  # the largest call may take at most 1/POOL_SHARE of the KV pool


def scaled_tokens(n: int, scale: float) -> int:
    """`n` x `scale`, rounded half up, at least 1."""
    if scale == 1.0:
        return int(n)
    return max(1, int(math.floor(n * scale + 0.5)))


def max_call_tokens(trace: Trace) -> int:
    """Tokens of the largest call in the trace: prompt + output."""
    best = 0
    for t in trace.tasks:
        wf = t.workflow
        for nid, node in wf.nodes.items():
            best = max(best, wf.prompt_tokens(nid) + node.output_tokens)
    return best


def auto_token_scale(trace: Trace, context_len: int, pool_tokens: int | None = None) -> float:
    """The largest factor in `SCALES` with which the largest call fits (see module doc)."""
    limit = context_len if pool_tokens is None else min(context_len, pool_tokens // POOL_SHARE)
    for s in SCALES:
        if max_call_tokens(scale_trace(trace, s)) <= limit:
            return s
    return SCALES[-1]


def _scale_agents(agents, s: float) -> dict[str, Agent]:
    return {k: Agent(a.name, scaled_tokens(a.prefix_tokens, s)) for k, a in agents.items()}


def _scale_workflow(wf: Workflow, s: float, time_scale: float) -> Workflow:
    nodes = {
        k: replace(
            n,
            input_tokens=scaled_tokens(n.input_tokens, s),
            output_tokens=scaled_tokens(n.output_tokens, s),
            gap_s=n.gap_s * time_scale,
        )
        for k, n in wf.nodes.items()
    }
    return Workflow(wf.name, _scale_agents(wf.agents, s), nodes)


def scale_trace(trace: Trace, token_scale: float = 1.0, time_scale: float = 1.0) -> Trace:
    """A copy of `trace` with token counts x `token_scale` and times x `time_scale`."""
    if not (0 < token_scale <= 1):
        raise ValueError(f"token_scale must be in (0, 1], got {token_scale}")
    if not time_scale > 0:
        raise ValueError(f"time_scale must be positive, got {time_scale}")
    if token_scale == 1.0 and time_scale == 1.0:
        return trace
    cache: dict[int, Workflow] = {}  # tasks may share a Workflow object

    def wf_of(w: Workflow) -> Workflow:
        if id(w) not in cache:
            cache[id(w)] = _scale_workflow(w, token_scale, time_scale)
        return cache[id(w)]

    tasks = tuple(Task(t.task_id, t.arrival * time_scale, wf_of(t.workflow), t.template) for t in trace.tasks)
    templates = {
        name: WorkflowTemplate(tpl.name, _scale_agents(tpl.agents, token_scale), tpl.stages)
        for name, tpl in trace.templates.items()
    }
    return Trace(trace.name, tasks, templates)
