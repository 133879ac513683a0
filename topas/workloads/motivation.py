"""The paper's motivation experiment (docs/workflow_model.md): one-call tasks of two agents with
long prefixes, arriving either alternating between the agents (A, B, A, B, ...) or grouped
(A x g, B x g, ...). With a KV pool that holds one prefix plus a batch but not two prefixes
plus a batch, alternation shrinks the batch (the paper: halves it, 1.8-1.9x slower).

Defaults for Qwen2.5-32B / A100-80GB (KV pool 22,035 tokens): prefixes 8,192 each;
two prefixes = 16,384 leave ~5.6k for requests (~7 calls of 768); one leaves ~13.8k (~18).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topas.workflow import Agent, CallNode, Task, Trace, Workflow, WorkflowTemplate, template_of
from topas.workloads.arrivals import poisson_arrivals, streams
from topas.workloads.config import Generator, WorkloadConfig, positive_int


class TwoAgents(Generator):
    name = "two_agents"
    defaults = {"prefix_tokens": 8192, "input_tokens": 256, "output_tokens": 512, "pattern": "alternating", "group": 16}

    def check(self, params: dict[str, Any]) -> None:
        for k in ("prefix_tokens", "input_tokens", "output_tokens", "group"):
            params[k] = positive_int(self.name, k, params[k])
        if params["pattern"] not in ("alternating", "grouped"):
            raise ValueError(f"workload '{self.name}': param pattern must be alternating or grouped, got {params['pattern']!r}")

    def _wf(self, agent: str, params: Mapping[str, Any]) -> Workflow:
        agents = {a: Agent(a, int(params["prefix_tokens"])) for a in ("A", "B")}
        node = CallNode("call", agent, int(params["input_tokens"]), int(params["output_tokens"]), stage=f"call_{agent}")
        return Workflow(f"call_{agent}", agents, {"call": node})

    def templates(self, params: Mapping[str, Any]) -> dict[str, WorkflowTemplate]:
        return {f"call_{a}": template_of(self._wf(a, params)) for a in ("A", "B")}

    def agent_of(self, task_id: int, params: Mapping[str, Any]) -> str:
        k = task_id if params["pattern"] == "alternating" else task_id // int(params["group"])
        return "AB"[k % 2]

    def build(self, cfg: WorkloadConfig, seed: int) -> Trace:
        """As the base generator, but each task follows its own agent's template."""
        params = self.resolve_params(cfg.params)
        if cfg.arrival_rate is None or cfg.num_tasks is None:
            raise ValueError(f"workload '{cfg.name}': needs arrival_rate and num_tasks")
        arrivals = poisson_arrivals(cfg.arrival_rate, cfg.num_tasks, streams(seed, cfg.name)[0])
        tasks = []
        for i in range(cfg.num_tasks):
            wf = self._wf(self.agent_of(i, params), params)
            tasks.append(Task(i, arrivals[i], wf, wf.name))
        return Trace(cfg.name, tuple(tasks), self.templates(params))
