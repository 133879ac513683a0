"""Engine semantics of the simulator (SGLang mirror) on hand-built and random workloads."""

import io
import random

import pytest
from conftest import chain_workflow, check_run, engine_config, make_trace, random_agents, random_dag, run_sim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topas.engines.sim.admission import AddResult, KVPool, PrefillBudget
from topas.engines.sim.entities import SimTask, make_request
from topas.engines.sim.radix import RadixCache
from topas.engines.sim.records import sim_record
from topas.workflow import Agent, CallNode, Task, Workflow


def test_chain_runs_in_order_and_reuses_prefixes():
    tr = make_trace([chain_workflow() for _ in range(5)], [0, 10, 20, 30, 40])
    e = run_sim(tr, "fcfs")
    rec = check_run(e)
    r = rec.requests.set_index("rid")
    # first task pays the full prompt; later tasks of the same agent reuse the 500-token prefix
    assert r.loc["0:a", "prefix_hit_tokens"] == 0
    assert r.loc["1:a", "prefix_hit_tokens"] == 500
    assert r.loc["1:a", "computed_tokens"] == 100


def test_second_call_prefills_only_its_uncached_segments():
    # turn 2 of the same agent carries turn 1's input and output: all but the last output token is cached
    ag = {"a": Agent("a", 400)}
    from topas.workflow import SegmentRef

    nodes = {
        "t1": CallNode("t1", "a", 50, 30),
        "t2": CallNode("t2", "a", 20, 10, deps=("t1",), history=(SegmentRef("in", "t1"), SegmentRef("out", "t1"))),
    }
    tr = make_trace([Workflow("react", ag, nodes)], [0.0])
    rec = check_run(run_sim(tr, "fcfs"))
    r = rec.requests.set_index("rid")
    assert r.loc["0:t2", "prompt_tokens"] == 400 + 50 + 30 + 20
    assert r.loc["0:t2", "prefix_hit_tokens"] == 400 + 50 + 29
    assert r.loc["0:t2", "computed_tokens"] == 21


def test_exact_reservation_never_retracts():
    # with ignore_eos clients (exact max_new_tokens) admission reserves every future token
    ag = {"a": Agent("a", 50)}
    wfs = [Workflow("w", ag, {"x": CallNode("x", "a", 100, 600)}) for _ in range(8)]
    e = run_sim(make_trace(wfs, [0.0] * 8), "fcfs", kv_pool_tokens=2500)
    check_run(e)
    assert e.stats.retractions == 0


def test_same_seed_gives_byte_identical_tables():
    rng = random.Random(7)
    agents = random_agents(rng, 3)
    wfs = [random_dag(rng, 6, agents, f"w{i}") for i in range(25)]
    tr = make_trace(wfs, sorted(rng.uniform(0, 20) for _ in wfs))

    def table():
        buf = io.BytesIO()
        sim_record(run_sim(tr, "lpm", kv_pool_tokens=4000), 0.1).tasks.to_parquet(buf)
        return buf.getvalue()

    assert table() == table()


def test_memory_pressure_retracts_and_still_finishes():
    # without ignore_eos SGLang reserves only new_token_ratio (0.7, decaying) of max_new_tokens:
    # long outputs in a small pool then run out of memory during decode and are retracted
    ag = {"a": Agent("a", 50)}
    wfs = [Workflow("w", ag, {"x": CallNode("x", "a", 100, 900)}) for _ in range(8)]
    e = run_sim(make_trace(wfs, [0.0] * 8), "fcfs", kv_pool_tokens=4000, ignore_eos=False, max_new_tokens_cap=1000)
    check_run(e)
    assert e.stats.retractions > 0


def test_prompt_larger_than_pool_stalls_with_a_clear_error():
    from topas.engines.sim.engine import EngineStall

    ag = {"a": Agent("a", 50)}
    tr = make_trace([Workflow("w", ag, {"x": CallNode("x", "a", 5000, 10)})], [0.0])
    with pytest.raises(EngineStall, match="admitted none that fits"):
        run_sim(tr, "fcfs", kv_pool_tokens=1000)


def _req(task_id, prompt, out):
    ag = {"a": Agent("a", 10)}
    wf = Workflow("w", ag, {"x": CallNode("x", "a", prompt - 10, out)})
    return make_request(SimTask(Task(task_id, 0.0, wf, "w")), "x", 0.0, True, 4096)


def test_admission_reserves_like_sglang():
    """rem_total = free + evictable - sum(running max_new - generated) ; a candidate needs
    extend + max_new + 1 < rem_total (SGLang PrefillAdder.add_one_req)."""
    cfg = engine_config(kv_pool_tokens=1000, chunked_prefill_size=8192, max_prefill_tokens=16384)
    cache = RadixCache(1000)
    pool = KVPool(1000, cache)
    running = _req(0, 100, 300)
    running.generated = 100
    pool.private = 300  # its prompt + decoded tokens
    budget = PrefillBudget(cfg, pool, [running], new_token_ratio=0.7)
    assert budget.total_offset == 200  # ignore_eos: ratio 1.0 on the 200 tokens still to decode
    assert budget.remaining_total == 1000 - 300 - 200
    big = _req(1, 300, 199)  # 300 + 199 + 1 = 500, not < 500
    ok, state, _ = budget.add_one(big)
    assert not ok and state == AddResult.NO_TOKEN
    small = _req(2, 300, 198)  # 499 < 500
    ok, state, _ = budget.add_one(small)
    assert ok and budget.total_offset == 200 + 301 + 198


def test_chunked_prefill_splits_long_prompts():
    ag = {"a": Agent("a", 100)}
    tr = make_trace([Workflow("w", ag, {"x": CallNode("x", "a", 4900, 5)})], [0.0])
    e = run_sim(tr, "fcfs", chunked_prefill_size=2048)
    check_run(e)
    assert e.stats.prefill_iterations == 3  # 5000 tokens in 2048-token chunks


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_tasks=st.integers(1, 12), pool=st.sampled_from([3000, 6000, 20000]),
       policy=st.sampled_from(["fcfs", "lpm"]), gap=st.sampled_from([0.0, 0.3]))
def test_random_dags_respect_every_invariant(seed, n_tasks, pool, policy, gap):
    rng = random.Random(seed)
    agents = random_agents(rng, rng.randint(1, 4))
    wfs = []
    for i in range(n_tasks):
        w = random_dag(rng, rng.randint(1, 7), agents, f"w{i}")
        if gap:
            nodes = {k: CallNode(n.id, n.agent, n.input_tokens, n.output_tokens, n.deps, n.history, gap_s=gap) for k, n in w.nodes.items()}
            w = Workflow(w.name, w.agents, nodes)
        wfs.append(w)
    arrivals = sorted(rng.choice([0.0, rng.uniform(0, 5)]) for _ in wfs)
    check_run(run_sim(make_trace(wfs, arrivals), policy, kv_pool_tokens=pool, host_cache_ratio=rng.choice([0.0, 2.0])))


def test_load_back_time_is_latency_plus_bytes_over_bandwidth():
    from topas.engines.latency.costs import transfer_seconds

    cfg = engine_config(kv_bytes_per_token=262144, host_link_gbs=24.0, host_link_latency_s=5e-6)
    assert cfg.transfer_time(0) == 0.0
    assert cfg.transfer_time(6144) == pytest.approx(5e-6 + 6144 * 262144 / 24e9)
    assert transfer_seconds(1000, 1024, 1.0, 0.0) == pytest.approx(1000 * 1024 / 1e9)


def test_host_hit_is_loaded_back_and_overlaps_the_forward_pass():
    """A prefix evicted to the host tier is loaded back on the next hit (not recomputed); the
    iteration lasts max(compute, transfer), as HiCache's layer-wise load overlaps the forward."""
    ag = {"a": Agent("a", 4000), "b": Agent("b", 4000)}
    wfs = [Workflow("wa", ag, {"x": CallNode("x", "a", 10, 5)}), Workflow("wb", ag, {"x": CallNode("x", "b", 10, 5)}),
           Workflow("wa", ag, {"x": CallNode("x", "a", 10, 5)})]
    # the pool holds one prefix at a time: b evicts a to the host, the third task loads a back
    e = run_sim(make_trace(wfs, [0.0, 5.0, 10.0]), "fcfs", kv_pool_tokens=6000, host_link_gbs=0.01)
    rec = check_run(e)
    r = rec.requests.set_index("task_id")
    assert r.loc[2, "host_hit_tokens"] == 4000 and r.loc[2, "computed_tokens"] == 10
    # 4000 tokens x 1024 B at 0.01 GB/s = 0.41 s >> the 6 ms compute of 10 tokens
    load = e.cfg.transfer_time(4000)
    tl = rec.timeline[(rec.timeline["kind"] == "prefill") & (rec.timeline["start"] >= 10.0)]
    assert tl["duration"].iloc[0] == pytest.approx(load)
