"""FCFS and LPM reproduce SGLang 0.5.23's waiting-queue orderings."""

from conftest import make_view, req_info

from topas.policy import create_policy


def test_fcfs_keeps_queue_order_and_stops_at_first_misfit():
    v = make_view([req_info("0:b", cached=900), req_info("1:a"), req_info("2:c", cached=500)])
    d = create_policy("fcfs").schedule(v)
    assert d.admit == ("0:b", "1:a", "2:c") and d.stop_at_first_misfit


def test_lpm_orders_by_cached_prefix_longest_first_stable():
    v = make_view([req_info("0:x", "x", 0, cached=100), req_info("1:y", "y", 1, cached=700),
                   req_info("2:z", "z", 2, cached=700), req_info("3:w", "w", 3, cached=300)])
    assert create_policy("lpm").schedule(v).admit == ("1:y", "2:z", "3:w", "0:x")


def test_lpm_deprioritizes_requests_sharing_an_uncached_prefix():
    # two cold requests of agent a share a 500-token prefix: SGLang serves one, defers the other
    v = make_view([req_info("0:a1", "a", 0), req_info("1:a2", "a", 1), req_info("2:b", "b", 2)])
    assert create_policy("lpm").schedule(v).admit == ("0:a1", "2:b", "1:a2")


def test_lpm_falls_back_to_fcfs_above_128_waiting():
    many = [req_info(f"{i}:n", f"ag{i}", i, cached=i) for i in range(129)]
    assert create_policy("lpm").schedule(make_view(many)).admit == tuple(r.rid for r in many)
    fewer = many[:128]
    assert create_policy("lpm").schedule(make_view(fewer)).admit[0] == "127:n"


def test_lpm_beats_fcfs_on_cache_hits_in_the_simulator():
    from conftest import make_trace, run_sim

    from topas.engines.sim.records import sim_record
    from topas.workflow import Agent, CallNode, Workflow

    # alternating agents with 3k-token prefixes; the pool holds one prefix plus a batch (paper section 1)
    ags = {"a": Agent("a", 3000), "b": Agent("b", 3000)}
    wfs = [Workflow(f"w{i % 2}", {k: ags[k] for k in ("a", "b")}, {"x": CallNode("x", "ab"[i % 2], 50, 40)}) for i in range(40)]
    tr = make_trace(wfs, [0.0] * 40)
    hits = {}
    for p in ("fcfs", "lpm"):
        rec = sim_record(run_sim(tr, p, kv_pool_tokens=4500, host_cache_ratio=0.0, max_running_requests=4), 0.0)
        hits[p] = rec.requests["prefix_hit_tokens"].sum()
    assert hits["lpm"] > 0.9 * 40 * 3000 > hits["fcfs"]
