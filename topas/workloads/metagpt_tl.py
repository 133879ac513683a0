"""MetaGPT-TL: the MGX TeamLeader star as nine sequential stages (docs/workloads.md).

    tl1 -> pm -> tl2 -> arch -> tl3 -> eng_write -> tl4 -> eng_revise -> tl5

TeamLeader stages are single command turns; member stages are runs of ReAct turns
(ProductManager 2, Architect 5, Engineer2 2 + N file turns, then 1 revise turn), N drawn as
in SOP. Every turn of an agent extends that agent's conversation in this task: turn k's
prompt = agent prefix + (in, out) of the agent's earlier turns + fresh input, so both the
prefix and the task-level history are reusable. The TeamLeader keeps its own conversation
across its five stages in the same way. The revise stage's conversation also receives the
TeamLeader's review (output of tl4). Turn lengths are replayed from the one TL replay
(pygame_2048) per `tl.nine_stage_mapping` in the data file; sampled are N, the code of every
file turn (SOP WriteCode output distribution), the later file turns' fresh/command tokens,
and the review stage tl4 (not in the replay).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from topas.workflow import Agent, CallNode, SegmentRef, TemplateStage, Workflow, WorkflowTemplate
from topas.workloads import metagpt
from topas.workloads.config import Generator, non_negative, positive_int
from topas.workloads.metagpt import Turn


class MetaGPTTl(Generator):
    name = "metagpt_tl"
    defaults = {
        "n_files": None,  # null = sampled from the SOP projects' file counts (3-5); an int fixes N
        "gap_s": 0.0,  # client-side delay before every non-first call (tool time)
    }

    def check(self, params: dict[str, Any]) -> None:
        if params["n_files"] is not None:
            params["n_files"] = positive_int(self.name, "n_files", params["n_files"])
        params["gap_s"] = non_negative(self.name, "gap_s", params["gap_s"])

    @staticmethod
    def agents() -> dict[str, Agent]:
        return {a: Agent(a, n) for a, n in metagpt.tl().prefix_tokens.items()}

    def expected_turns(self, params: Mapping[str, Any]) -> dict[str, float]:
        cal = metagpt.tl()
        n = cal.n_files.mean() if params["n_files"] is None else float(params["n_files"])
        out = {}
        for s in cal.stages:
            out[s.id] = float(len(s.turns) or 1) + (n if s.id == "eng_write" else 0.0)
        return out

    def templates(self, params: Mapping[str, Any]) -> dict[str, WorkflowTemplate]:
        cal = metagpt.tl()
        counts = self.expected_turns(params)
        ids = [s.id for s in cal.stages]
        stages = {
            s.id: TemplateStage(s.id, s.agent, (ids[i - 1],) if i else (), counts[s.id])
            for i, s in enumerate(cal.stages)
        }
        return {self.name: WorkflowTemplate(self.name, self.agents(), stages)}

    def _turns(self, stage: metagpt.TlStage, rng: np.random.Generator, n_files: int) -> list[Turn]:
        cal = metagpt.tl()
        if stage.sampled is not None:
            fresh, out = stage.sampled
            return [Turn(fresh.sample(rng), out.sample(rng))]
        turns = list(stage.turns)
        if stage.id == "eng_write":
            for i in range(n_files):
                if i == 0:
                    fresh, cmd = cal.first_file_turn.fresh, cal.first_file_turn.output
                else:
                    fresh, cmd = cal.file_turn_fresh.sample(rng), cal.file_turn_output.sample(rng)
                turns.append(Turn(fresh, cmd + cal.code_output.sample(rng)))
        return turns

    def workflow(self, task_id: int, rng: np.random.Generator, params: Mapping[str, Any]) -> Workflow:
        cal = metagpt.tl()
        gap = float(params["gap_s"])
        n_files = params["n_files"] if params["n_files"] is not None else cal.n_files.sample(rng)
        nodes: dict[str, CallNode] = {}
        conversation: dict[str, list[SegmentRef]] = {a: [] for a in cal.prefix_tokens}
        last_of_stage: dict[str, str] = {}
        prev: str | None = None
        for stage in cal.stages:
            conv = conversation[stage.agent]
            if stage.history_extra is not None:
                conv.append(SegmentRef("out", last_of_stage[stage.history_extra]))
            for k, t in enumerate(self._turns(stage, rng, n_files), start=1):
                nid = f"{stage.id}_{k}"
                nodes[nid] = CallNode(
                    id=nid,
                    agent=stage.agent,
                    input_tokens=t.fresh,
                    output_tokens=t.output,
                    deps=(prev,) if prev else (),
                    history=tuple(conv),
                    stage=stage.id,
                    gap_s=gap if prev else 0.0,
                )
                conv += [SegmentRef("in", nid), SegmentRef("out", nid)]
                prev = last_of_stage[stage.id] = nid
        return Workflow(self.name, self.agents(), nodes)
