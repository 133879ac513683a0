"""A decode step never gets cheaper when a request joins it (topas.engines.latency.base.decode_batch_time).

Priced by (batch size, mean context) alone, a long request batched with a short one ran faster
than alone: aiconfigurator (Qwen2.5-32B, A100) has decode(2, 6470) < decode(1, 11940). The
simulator and the cost model price a batch by the envelope over its k longest requests instead.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import yaml
from conftest import engine_config, make_trace
from hypothesis import example, given, settings
from hypothesis import strategies as st

from topas.engines.latency.base import LatencyModel, decode_batch_time, top_context_means
from topas.engines.latency.costs import LatencyCostModel
from topas.engines.latency.factory import build_latency_model
from topas.engines.latency.measured import ProfileLatency
from topas.engines.latency.specs import load_gpu_spec, load_model_spec
from topas.engines.sim.engine import SimEngine
from topas.policy import create_policy
from topas.workflow import Agent, CallNode, Workflow

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "analysis" / "results" / "fidelity" / "profile.json"
PREDICTORS = ["aiconfigurator", "roofline", "profile"]


@cache
def predictor(kind: str, m: str, g: str) -> LatencyModel:
    spec = load_model_spec(yaml.safe_load((ROOT / "conf" / "model" / f"{m}.yaml").read_text()))
    dev = load_gpu_spec(yaml.safe_load((ROOT / "conf" / "gpu" / f"{g}.yaml").read_text()))
    return build_latency_model(kind, spec, dev)


@cache
def latency(kind: str) -> LatencyModel:
    if kind == "profile":
        if not PROFILE.is_file():
            pytest.skip(f"no measured profile at {PROFILE}")
        return ProfileLatency.from_file(PROFILE)
    return predictor(kind, "qwen2_5_32b", "a100_80gb")


def step(lat: LatencyModel, contexts: list[int], steps_ahead: int = 0) -> float:
    return decode_batch_time(lat, top_context_means(contexts), steps_ahead)


contexts_st = st.lists(st.integers(1, 32768), min_size=1, max_size=160)


@pytest.mark.parametrize("kind", PREDICTORS)
@settings(deadline=None)
@given(contexts=contexts_st, extra=st.integers(1, 32768), ahead=st.sampled_from([0, 1, 63, 500]))
# a long request next to a short one: the (batch size, mean context) price undercut the long one alone
@example(contexts=[11940], extra=1000, ahead=0)
# 120 equal contexts plus a 1-token request: the floor of the new mean drops 120 tokens of KV over
# the batch, more than one request's activations weigh in the roofline (~106 tokens of KV)
@example(contexts=[970] * 120, extra=1, ahead=0)
def test_adding_a_request_never_makes_the_step_cheaper(kind: str, contexts: list[int], extra: int, ahead: int) -> None:
    lat = latency(kind)
    before = step(lat, contexts, ahead)
    assert step(lat, contexts + [extra], ahead) >= before
    # and a batch is never faster than any of its members alone
    assert before >= max(step(lat, [c], ahead) for c in set(contexts))


@pytest.mark.parametrize("kind", PREDICTORS)
def test_long_call_with_a_short_one_is_not_faster_than_alone(kind: str) -> None:
    lat = latency(kind)
    alone = lat.decode(1, 11940)
    assert step(lat, [11940]) == alone
    assert step(lat, [11940, 1000]) >= alone
    assert step(lat, [11940, 1000, 1000, 1000]) >= step(lat, [11940, 1000])
    costs = LatencyCostModel(lat, 262144, 24.0, 5e-6)
    assert costs.decode_batch_step_time([11940, 1000]) >= costs.decode_step_time(1, 11940)


def test_the_plain_price_undercuts_here() -> None:
    """The case above is a real one: the raw (2, mean) price is below the long request alone."""
    lat = latency("aiconfigurator")
    assert lat.decode(2, (11940 + 1000) // 2) < lat.decode(1, 11940)


@pytest.mark.parametrize("kind", PREDICTORS)
def test_envelope_is_the_plain_price_for_equal_contexts(kind: str) -> None:
    lat = latency(kind)
    for n, c in [(1, 100), (8, 4096), (64, 4096), (200, 1500)]:
        assert step(lat, [c] * n) == lat.decode(n, c)


@pytest.mark.parametrize("m", ["qwen2_5_32b", "llama3_1_8b"])
@pytest.mark.parametrize("g", ["a100_80gb", "h100_80gb", "h200"])
@pytest.mark.parametrize("kind", ["aiconfigurator", "roofline", "profile"])
def test_predictors_are_non_decreasing(kind: str, m: str, g: str) -> None:
    """What the envelope's argument needs (context) and the cost model's (batch size, context)."""
    if kind == "profile":
        if (m, g) != ("qwen2_5_32b", "a100_80gb"):
            pytest.skip("one profile")
        lat = latency("profile")
    else:
        lat = predictor(kind, m, g)
    ctxs = list(range(1, 300)) + list(range(300, 40000, 37))
    for b in [1, 2, 3, 5, 8, 13, 17, 64, 129, 256, 300, 1000]:
        row = [lat.decode(b, c) for c in ctxs]
        assert all(y >= x for x, y in zip(row, row[1:])), (b, "context")
    for c in [1, 64, 65, 1000, 4097, 11940, 32768]:
        col = [lat.decode(b, c) for b in range(1, 600)]
        assert all(y >= x for x, y in zip(col, col[1:])), (c, "batch size")


def _single(name: str, prefix: int, out: int) -> Workflow:
    return Workflow(name, {name: Agent(name, prefix)}, {"n": CallNode("n", name, 40, out)})


@pytest.mark.parametrize("kind", ["aiconfigurator", "profile"])
def test_sim_long_call_batched_with_a_short_one_decodes_no_faster_than_alone(kind: str) -> None:
    lat = latency(kind)
    # 11,940- and 1,000-token prompts arrive together, prefill in one batch and decode together;
    # the short one outlives the long one's 19 decode steps (contexts 11,941..11,959: one
    # aiconfigurator context quantum, so the engine's stretch pricing is exact for batch 1 too)
    trace = make_trace([_single("long", 11900, 20), _single("short", 960, 200)], [0.0, 0.0])
    cfg = engine_config(kv_pool_tokens=40000, chunked_prefill_size=16384, max_prefill_tokens=16384)
    eng = SimEngine(cfg, lat, create_policy("fcfs"), trace,
                    LatencyCostModel(lat, cfg.kv_bytes_per_token, cfg.host_link_gbs, cfg.host_link_latency_s))
    eng.run()
    long = next(r for r in eng.requests if r.rid == "0:n")
    assert long.prompt_tokens == 11940
    rows = [row for row in eng.timeline if row["kind"] == "decode" and row["start"] >= long.first_token_time - 1e-12
            and row["start"] + row["duration"] <= long.finish_time + 1e-12]
    assert sum(row["steps"] for row in rows) == long.output_tokens - 1  # every decode step of the long call
    assert all(row["batch_size"] == 2 for row in rows)  # ... batched with the short one
    decode_s = sum(row["duration"] for row in rows)
    batch1_s = sum(lat.decode(1, long.prompt_tokens + g) for g in range(1, long.output_tokens))
    assert decode_s >= batch1_s * (1 - 1e-12)
