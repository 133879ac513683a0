"""MetaGPT calibration: what the SOP and TL generators sample from (docs/workloads.md).

Data: `data/metagpt_calibration.json`, a copy (with provenance) of the measured token counts
in shared/calibration. This module only *derives* distributions from it; the generators
are in `metagpt_sop.py` and `metagpt_tl.py`.

SOP (metagpt 0.8.2). A call's prompt is modelled as agent prefix (the role's system message,
qwen3 tokens) + history (the upstream outputs MetaGPT really pastes into the prompt) + fresh
tokens. Fresh tokens are the *residual* of each replayed call: measured user tokens minus the
upstream outputs it contains, over the six LGTM replays:

    WritePRD            user (the requirement; no upstream output)
    WriteDesign         user - PRD
    WriteTasks          user - design
    WriteCode(f_i)      user - design - tasks - code(f_1 .. f_{i-1})
    WriteCodeReview(f_i) user - design - tasks - code(f_1 .. f_i)
    WriteTest(f)        user - code(f)                       (QA only)
    RunCode(f)          user - code(f) - test(f)             (QA only)
    DebugError(f)       user - code(f) - test(f) - run(f)    (QA only; one measurement)

Outputs: WritePRD / WriteDesign / WriteTasks / WriteCode from the replays (real MetaGPT
artifacts); WriteCodeReview / WriteTest / RunCode / DebugError from the rsp cache (real model
responses; the replays' outputs for these are scripted). N (files) is drawn from the six
projects' file counts. All (min, median, max) statistics are sampled with the two-piece
log-uniform of `sampling.py`.

TL (MetaGPT HEAD, MGX): see `tl.nine_stage_mapping` in the data file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from topas.workloads.sampling import Categorical, MinMedMax, rsp_stat

DATA_FILE = Path(__file__).parent / "data" / "metagpt_calibration.json"

SOP_ACTIONS = ("WritePRD", "WriteDesign", "WriteTasks", "WriteCode", "WriteCodeReview")
QA_ACTIONS = ("WriteTest", "RunCode", "DebugError")
SOP_ROLE = {
    "WritePRD": "ProductManager",
    "WriteDesign": "Architect",
    "WriteTasks": "ProjectManager",
    "WriteCode": "Engineer",
    "WriteCodeReview": "Engineer",
    "WriteTest": "QaEngineer",
    "RunCode": "QaEngineer",
    "DebugError": "QaEngineer",
}
OUTPUT_FROM_REPLAY = ("WritePRD", "WriteDesign", "WriteTasks", "WriteCode")  # else from the rsp cache


@lru_cache(maxsize=1)
def raw() -> dict:
    with open(DATA_FILE, encoding="utf-8") as f:
        return json.load(f)


def _match_residuals(users: Sequence[int], parts: Sequence[int], tol: int = 12) -> list[int]:
    """Each prompt in `users` embeds one of `parts` plus a near-constant template remainder r.
    Find the r that explains the most prompts (within `tol`), return each prompt's remainder."""
    best: tuple[int, int, int] | None = None  # (hits, -spread, r)
    for u0 in users:
        for p0 in parts:
            r = u0 - p0
            devs = [min(abs(u - p - r) for p in parts) for u in users]
            key = (sum(d <= tol for d in devs), -sum(devs), r)
            if best is None or key > best:
                best = key
    assert best is not None
    r = best[2]
    return [u - min(parts, key=lambda p: abs(u - p - r)) for u in users]


@dataclass(frozen=True)
class SopCalibration:
    system_tokens: dict[str, int]  # action -> system-message tokens (qwen3)
    fresh: dict[str, MinMedMax]  # action -> residual fresh tokens
    output: dict[str, MinMedMax]  # action -> output tokens
    user: dict[str, MinMedMax]  # action -> measured user tokens (reference for tests / reports)
    n_files: Categorical
    debug_prob: float  # DebugError per RunCode in the rsp cache


def _lgtm_replays() -> dict[str, dict]:
    return {k: v for k, v in raw()["sop"]["replays"].items() if k.endswith("_LGTM")}


@lru_cache(maxsize=1)
def sop() -> SopCalibration:
    d = raw()["sop"]
    summary, rsp = d["summary_by_action"], d["rsp_cache_stats"]["stats"]
    res: dict[str, list[int]] = {a: [] for a in SOP_ACTIONS + QA_ACTIONS}
    for rp in _lgtm_replays().values():
        calls = rp["calls"]
        by = {a: [c for c in calls if c["action"] == a] for a in SOP_ACTIONS + QA_ACTIONS}
        prd, des, tas = by["WritePRD"][0], by["WriteDesign"][0], by["WriteTasks"][0]
        res["WritePRD"].append(prd["user_tokens"])
        res["WriteDesign"].append(des["user_tokens"] - prd["output_tokens"])
        res["WriteTasks"].append(tas["user_tokens"] - des["output_tokens"])
        base = des["output_tokens"] + tas["output_tokens"]
        codes = [c["output_tokens"] for c in by["WriteCode"]]
        for i, (wc, cr) in enumerate(zip(by["WriteCode"], by["WriteCodeReview"])):
            res["WriteCode"].append(wc["user_tokens"] - base - sum(codes[:i]))
            res["WriteCodeReview"].append(cr["user_tokens"] - base - sum(codes[: i + 1]))
        tests = [c["output_tokens"] for c in by["WriteTest"]]
        res["WriteTest"] += _match_residuals([c["user_tokens"] for c in by["WriteTest"]], codes)
        test_out = round(sum(tests) / len(tests))  # scripted, constant (42-43) in the replays
        res["RunCode"] += _match_residuals([c["user_tokens"] for c in by["RunCode"]], [c + test_out for c in codes])
    # DebugError: the single failing run of the LBTM_FAIL replay (the RunCode whose output differs).
    fail = raw()["sop"]["replays"]["pygame_2048_LBTM_FAIL"]["calls"]
    runs = [c for c in fail if c["action"] == "RunCode"]
    modal = max({c["output_tokens"] for c in runs}, key=lambda o: sum(c["output_tokens"] == o for c in runs))
    failed = next(c for c in runs if c["output_tokens"] != modal)
    fcodes = [c["output_tokens"] for c in fail if c["action"] == "WriteCode"]
    ftest = [c["output_tokens"] for c in fail if c["action"] == "WriteTest"][0]
    run_fresh = MinMedMax.of(res["RunCode"]).median
    code = min(fcodes, key=lambda p: abs(failed["user_tokens"] - p - ftest - run_fresh))
    de = next(c for c in fail if c["action"] == "DebugError")
    res["DebugError"].append(de["user_tokens"] - code - ftest - failed["output_tokens"])

    output = {}
    for a in SOP_ACTIONS + QA_ACTIONS:
        output[a] = MinMedMax.from_mapping(summary[a]["output"]) if a in OUTPUT_FROM_REPLAY else rsp_stat(rsp[a], "out")
    user = {a: MinMedMax.from_mapping(summary[a]["user"]) for a in summary}
    n_files = Categorical(tuple(rp["n_code_files"] for rp in _lgtm_replays().values()))
    return SopCalibration(
        system_tokens={a: int(d["system_tokens_qwen3"][a]) for a in SOP_ACTIONS + QA_ACTIONS},
        fresh={a: MinMedMax.of(v) for a, v in res.items()},
        output=output,
        user=user,
        n_files=n_files,
        debug_prob=rsp["DebugError"]["n"] / rsp["RunCode"]["n"],
    )


# ----------------------------------------------------------------------------------------------
# TL
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    fresh: int
    output: int  # command output + folded helper outputs


@dataclass(frozen=True)
class TlStage:
    id: str
    agent: str
    turns: tuple[Turn, ...] = ()  # replayed turns (eng_write: the turns before the file turns)
    sampled: tuple[MinMedMax, MinMedMax] | None = None  # (fresh, output) of a stage not in the replay
    history_extra: str | None = None  # stage whose last output joins this agent's conversation


@dataclass(frozen=True)
class TlCalibration:
    prefix_tokens: dict[str, int]  # agent -> RoleZero system prompt (qwen3)
    stages: tuple[TlStage, ...]
    first_file_turn: Turn  # fresh and command output (the code is sampled separately)
    file_turn_fresh: MinMedMax  # later file turns
    file_turn_output: MinMedMax  # later file turns' command output (without the code)
    code_output: MinMedMax  # write_new_code output = SOP WriteCode output distribution
    n_files: Categorical


@lru_cache(maxsize=1)
def tl() -> TlCalibration:
    d = raw()["tl"]
    mapping = d["nine_stage_mapping"]
    calls = {c["idx"]: c for c in d["replay"]["calls"]}
    last: dict[str, tuple[int, int]] = {}  # agent -> (history tokens, folded output) of its last turn

    def turn(agent: str, spec: dict, keep_folded_output: bool = True) -> Turn:
        """A replayed command turn; fresh = its history - the agent's previous history - previous output."""
        c = calls[spec["replay"]]
        out = c["output_tokens"] + sum(calls[i]["output_tokens"] for i in spec["fold"])
        h_prev, o_prev = last.get(agent, (0, 0))
        last[agent] = (c["history_tokens"], out)
        return Turn(max(1, c["history_tokens"] - h_prev - o_prev), out if keep_folded_output else c["output_tokens"])

    stages: list[TlStage] = []
    file_turns: list[Turn] = []  # command output only: the code is sampled per task
    replayed: dict[int, Turn] = {}
    for s in mapping["stages"]:
        turns = []
        for spec in s.get("turns", []):
            turns.append(turn(s["agent"], spec))
            replayed[spec["replay"]] = turns[-1]
        file_turns += [turn(s["agent"], spec, keep_folded_output=False) for spec in s.get("file_turns", [])]
        stages.append(TlStage(s["id"], s["agent"], tuple(turns), None, s.get("history_extra")))
    for i, s in enumerate(mapping["stages"]):
        if "sampled_like" in s:  # a stage not in the replay (tl4)
            like = [replayed[j] for j in s["sampled_like"]]
            sampled = (MinMedMax.of(t.fresh for t in like), MinMedMax.of(t.output for t in like))
            stages[i] = TlStage(s["id"], s["agent"], (), sampled, s.get("history_extra"))
    prompts = d["rolezero_system_tokens_qwen3"]
    return TlCalibration(
        prefix_tokens={a: int(prompts[m["rolezero_key"]]) for a, m in mapping["agents"].items()},
        stages=tuple(stages),
        first_file_turn=file_turns[0],
        file_turn_fresh=MinMedMax.of(t.fresh for t in file_turns[1:]),
        file_turn_output=MinMedMax.of(t.output for t in file_turns[1:]),
        code_output=sop().output["WriteCode"],
        n_files=sop().n_files,
    )
