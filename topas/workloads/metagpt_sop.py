"""MetaGPT-SOP: the standard software-company pipeline of metagpt 0.8.2 (docs/workloads.md).

    prd -> design -> tasks -> write_code_1 -> code_review_1 -> ... -> write_code_N -> code_review_N
        [-> write_test_1..N -> run_code_1..N -> (debug_error_f -> rerun_code_f for each failing f)]   (qa: true)

Agents are (role, action) pairs, named "Role.Action": each action has its own prompt template,
so two actions of one role share only the 41-63-token system message before their prompts
diverge; modelling them as distinct agents keeps the simulator from inventing task-level
reuse across actions (e.g. a review reusing the WriteCode prompt's KV). The prefix of every
agent is its role's system message (qwen3 tokens). History = the upstream outputs MetaGPT
pastes into the prompt (see `metagpt.py`): WriteCode(f_i) contains the design, the task list
and the code of f_1..f_{i-1}; WriteCodeReview(f_i) also f_i. The code review is modelled as
LGTM (no rewrite), as in the six replays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from topas.workflow import Agent, CallNode, SegmentRef, TemplateStage, Workflow, WorkflowTemplate
from topas.workloads import metagpt
from topas.workloads.config import Generator, non_negative, positive_int

STAGE_ACTION = {
    "prd": "WritePRD",
    "design": "WriteDesign",
    "tasks": "WriteTasks",
    "write_code": "WriteCode",
    "code_review": "WriteCodeReview",
    "write_test": "WriteTest",
    "run_code": "RunCode",
    "debug_error": "DebugError",
    "rerun_code": "RunCode",
}
BASE_STAGES = ("prd", "design", "tasks", "write_code", "code_review")
QA_STAGES = ("write_test", "run_code", "debug_error", "rerun_code")


def agent_of(action: str) -> str:
    return f"{metagpt.SOP_ROLE[action]}.{action}"


class MetaGPTSop(Generator):
    name = "metagpt_sop"
    defaults = {
        "qa": False,  # MetaGPT's default (QaEngineer only with --run-tests)
        "qa_debug_prob": None,  # null = DebugError / RunCode count in the rsp cache (1/6)
        "n_files": None,  # null = sampled from the six projects' file counts (3-5); an int fixes N
        "gap_s": 0.0,  # client-side delay before every non-first call (tool time)
    }

    def check(self, params: dict[str, Any]) -> None:
        if not isinstance(params["qa"], bool):
            raise ValueError(f"workload '{self.name}': param qa must be true or false, got {params['qa']!r}")
        p = params["qa_debug_prob"]
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1):
            raise ValueError(f"workload '{self.name}': param qa_debug_prob must be null or in [0, 1], got {p!r}")
        if params["n_files"] is not None:
            params["n_files"] = positive_int(self.name, "n_files", params["n_files"])
        params["gap_s"] = non_negative(self.name, "gap_s", params["gap_s"])

    @staticmethod
    def debug_prob(params: Mapping[str, Any]) -> float:
        p = params["qa_debug_prob"]
        return metagpt.sop().debug_prob if p is None else float(p)

    @staticmethod
    def expected_files(params: Mapping[str, Any]) -> float:
        n = params["n_files"]
        return metagpt.sop().n_files.mean() if n is None else float(n)

    def agents(self, params: Mapping[str, Any]) -> dict[str, Agent]:
        cal = metagpt.sop()
        stages = BASE_STAGES + (QA_STAGES if params["qa"] else ())
        actions = sorted({STAGE_ACTION[s] for s in stages})
        return {agent_of(a): Agent(agent_of(a), cal.system_tokens[a]) for a in actions}

    def templates(self, params: Mapping[str, Any]) -> dict[str, WorkflowTemplate]:
        n = self.expected_files(params)
        count = {"write_code": n, "code_review": n, "write_test": n, "run_code": n}
        p = self.debug_prob(params)
        stages = list(BASE_STAGES)
        if params["qa"]:
            stages += ["write_test", "run_code"] + (["debug_error", "rerun_code"] if p > 0 else [])
            count.update(debug_error=p * n, rerun_code=p * n)
        tpl = {
            s: TemplateStage(s, agent_of(STAGE_ACTION[s]), (stages[i - 1],) if i else (), count.get(s, 1.0))
            for i, s in enumerate(stages)
        }
        return {self.name: WorkflowTemplate(self.name, self.agents(params), tpl)}

    def workflow(self, task_id: int, rng: np.random.Generator, params: Mapping[str, Any]) -> Workflow:
        cal = metagpt.sop()
        gap = float(params["gap_s"])
        nodes: dict[str, CallNode] = {}
        prev: list[str] = []

        def add(nid: str, stage: str, history: list[str]) -> str:
            action = STAGE_ACTION[stage]
            nodes[nid] = CallNode(
                id=nid,
                agent=agent_of(action),
                input_tokens=cal.fresh[action].sample(rng),
                output_tokens=cal.output[action].sample(rng),
                deps=tuple(prev[-1:]),
                history=tuple(SegmentRef("out", h) for h in history),
                stage=stage,
                gap_s=gap if prev else 0.0,
            )
            prev.append(nid)
            return nid

        n = params["n_files"] if params["n_files"] is not None else cal.n_files.sample(rng)
        prd = add("prd", "prd", [])
        design = add("design", "design", [prd])
        tasks = add("tasks", "tasks", [design])
        codes: list[str] = []
        for i in range(1, n + 1):
            wc = add(f"write_code_{i}", "write_code", [design, tasks, *codes])
            codes.append(wc)
            add(f"code_review_{i}", "code_review", [design, tasks, *codes])
        if params["qa"]:
            p = self.debug_prob(params)
            tests = [add(f"write_test_{i}", "write_test", [codes[i - 1]]) for i in range(1, n + 1)]
            runs = [add(f"run_code_{i}", "run_code", [codes[i - 1], tests[i - 1]]) for i in range(1, n + 1)]
            failed = [i for i in range(1, n + 1) if rng.random() < p]
            for i in failed:
                de = add(f"debug_error_{i}", "debug_error", [codes[i - 1], tests[i - 1], runs[i - 1]])
                add(f"rerun_code_{i}", "rerun_code", [codes[i - 1], de])
        return Workflow(self.name, self.agents(params), nodes)
