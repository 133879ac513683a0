"""The `shapes` workload generator: tasks of one sampled shape (spec.py), Poisson arrivals.

Every task has the shape's calls; each call's fresh input and output lengths are drawn per task
from its agent's measured distributions, so tasks differ in size but not in structure. A
scheduler sees the shape's template (one stage per call), never the drawn lengths.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from topas.workflow import Agent, CallNode, SegmentRef, TemplateStage, Workflow, WorkflowTemplate
from topas.workloads.config import Generator, non_negative, positive_int
from topas.workloads.shapes.catalog import parse_id, workload_name
from topas.workloads.shapes.spec import REFERENCE_POOL, ShapeSpec, shape_spec


@lru_cache(maxsize=256)
def _spec(shape_id: str, pool_tokens: int) -> ShapeSpec:
    return shape_spec(shape_id, pool_tokens)


class ShapesGenerator(Generator):
    name = "shapes"
    defaults = {
        "shape": "d0",  # the shape id (catalog.py): d<k> design sample, e<k> evaluation sample
        "pool_tokens": REFERENCE_POOL,  # the KV pool prefix shares refer to (a size, not the engine's pool)
        "gap_s": 0.0,  # client-side delay before every call with upstream calls (tool time)
    }

    def check(self, params: dict[str, Any]) -> None:
        parse_id(params["shape"])
        params["pool_tokens"] = positive_int(self.name, "pool_tokens", params["pool_tokens"])
        params["gap_s"] = non_negative(self.name, "gap_s", params["gap_s"])

    def spec(self, params: Mapping[str, Any]) -> ShapeSpec:
        return _spec(params["shape"], params["pool_tokens"])

    def template_name(self, params: Mapping[str, Any]) -> str:
        return workload_name(params["shape"])

    def _agents(self, spec: ShapeSpec) -> dict[str, Agent]:
        return {a.name: Agent(a.name, a.prefix_tokens) for a in spec.agents.values()}

    def templates(self, params: Mapping[str, Any]) -> dict[str, WorkflowTemplate]:
        spec = self.spec(params)
        stages = {s.id: TemplateStage(s.id, s.agent, s.deps) for s in spec.stages}
        name = self.template_name(params)
        return {name: WorkflowTemplate(name, self._agents(spec), stages)}

    def workflow(self, task_id: int, rng: np.random.Generator, params: Mapping[str, Any]) -> Workflow:
        spec = self.spec(params)
        gap = float(params["gap_s"])
        nodes = {}
        for s in spec.stages:
            a = spec.agents[s.agent]
            nodes[s.id] = CallNode(
                id=s.id, agent=s.agent, input_tokens=a.fresh.sample(rng), output_tokens=a.output.sample(rng),
                deps=s.deps, history=tuple(SegmentRef(kind, n) for kind, n in s.history), stage=s.id,
                gap_s=gap if s.deps else 0.0,
            )
        return Workflow(self.template_name(params), self._agents(spec), nodes)
