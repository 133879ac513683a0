"""The paper's synthetic DAGs (shapes not public; ours documented in topas/workloads/README.md).

    chain3      A -> B -> C                              three agents in sequence
    dag4        S -> {L, R} -> J                         four-node diamond: source, fan-out 2, join
    dag10_wide  S -> {W1 .. W8} -> J                     source, 8 parallel calls, join

Every node is its own agent and its own template stage, with a fixed fresh input
(`input_tokens`, the "query") and a fixed generation length (`output_tokens`). A node's
prompt = its agent prefix + the outputs of its direct upstream calls (history, in
dependency order) + its fresh input. Prefix lengths are per agent (`prefix_tokens`).
Nothing is random except the arrivals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from topas.workflow import Agent, CallNode, SegmentRef, Workflow, WorkflowTemplate, template_of
from topas.workloads.config import Generator, non_negative, positive_int

# (node id, agent, deps) per shape; node ids are the lower-cased agent names.
SHAPES: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "chain3": (("a", "A", ()), ("b", "B", ("a",)), ("c", "C", ("b",))),
    "dag4": (("s", "S", ()), ("l", "L", ("s",)), ("r", "R", ("s",)), ("j", "J", ("l", "r"))),
    "dag10_wide": (
        ("s", "S", ()),
        *((f"w{i}", f"W{i}", ("s",)) for i in range(1, 9)),
        ("j", "J", tuple(f"w{i}" for i in range(1, 9))),
    ),
}

# Defaults: see conf/workload/<name>.yaml and README.md for the KV-budget arithmetic.
DEFAULT_PREFIX: dict[str, dict[str, int]] = {
    "chain3": {"A": 6144, "B": 6144, "C": 4096},
    "dag4": {"S": 5120, "L": 4096, "R": 4096, "J": 3072},
    "dag10_wide": {"S": 1536, **{f"W{i}": 1536 for i in range(1, 9)}, "J": 1536},
}


class SyntheticGenerator(Generator):
    def __init__(self, shape: str) -> None:
        self.name = shape
        self.shape = SHAPES[shape]
        self.defaults = {
            "prefix_tokens": dict(DEFAULT_PREFIX[shape]),
            "input_tokens": 512,
            "output_tokens": 256,
            "gap_s": 0.0,
        }

    @property
    def agent_names(self) -> list[str]:
        return [agent for _, agent, _ in self.shape]

    def check(self, params: dict[str, Any]) -> None:
        pt = params["prefix_tokens"]
        if not isinstance(pt, Mapping):
            raise ValueError(f"workload '{self.name}': param prefix_tokens must map agent -> tokens")
        missing = sorted(set(self.agent_names) - set(pt))
        extra = sorted(set(pt) - set(self.agent_names))
        if missing or extra:
            raise ValueError(
                f"workload '{self.name}': prefix_tokens must name exactly the agents {self.agent_names}"
                f" (missing {missing}, unknown {extra})"
            )
        params["prefix_tokens"] = {a: positive_int(self.name, f"prefix_tokens.{a}", v) for a, v in pt.items()}
        for k in ("input_tokens", "output_tokens"):
            params[k] = positive_int(self.name, k, params[k])
        params["gap_s"] = non_negative(self.name, "gap_s", params["gap_s"])

    def _workflow(self, params: Mapping[str, Any]) -> Workflow:
        agents = {a: Agent(a, int(params["prefix_tokens"][a])) for a in self.agent_names}
        nodes = {}
        for nid, agent, deps in self.shape:
            nodes[nid] = CallNode(
                id=nid,
                agent=agent,
                input_tokens=int(params["input_tokens"]),
                output_tokens=int(params["output_tokens"]),
                deps=deps,
                history=tuple(SegmentRef("out", d) for d in deps),
                stage=nid,
                gap_s=float(params["gap_s"]) if deps else 0.0,
            )
        return Workflow(self.name, agents, nodes)

    def templates(self, params: Mapping[str, Any]) -> dict[str, WorkflowTemplate]:
        return {self.name: template_of(self._workflow(params))}

    def workflow(self, task_id: int, rng: np.random.Generator, params: Mapping[str, Any]) -> Workflow:
        return self._workflow(params)


GENERATORS = {name: SyntheticGenerator(name) for name in SHAPES}
