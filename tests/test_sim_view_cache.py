"""The simulator keeps a waiting call's RequestInfo and a task's TaskProgress between decisions and rebuilds
them only when a field they carry changed (docs/decisions/0046): at every decision of runs with retractions,
preemptions, chunked prefill and the host tier, each kept entry equals one built afresh."""

import pytest
from conftest import make_trace, run_sim

from topas.engines.sim.engine import SimEngine
from topas.workflow import Agent, CallNode, Workflow


@pytest.fixture
def checked_views(monkeypatch):
    """SimEngine.view wrapped to compare every entry of the view it returns with a fresh build."""
    counts = {"views": 0, "tasks": 0, "waiting": 0, "running": 0}
    original = SimEngine.view

    def checking_view(self: SimEngine):
        v = original(self)
        for tid, progress in v.tasks.items():
            assert progress == self.tasks[tid]._build_progress(), f"task {tid}: kept progress is stale"
        by_rid = {r.rid: r for r in self.waiting + self.running + ([self.chunked] if self.chunked else [])}
        for kind, infos in (("waiting", v.waiting), ("running", v.running)):
            for info in infos:
                fresh = by_rid[info.rid]._build_info(info.cached_tokens, info.host_cached_tokens, info.cached_nodes)
                assert info == fresh, f"{info.rid}: kept RequestInfo is stale"
            counts[kind] += len(infos)
        counts["views"] += 1
        counts["tasks"] += len(v.tasks)
        return v

    monkeypatch.setattr(SimEngine, "view", checking_view)
    return counts


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "topas"])
def test_kept_view_entries_equal_fresh_ones_under_memory_pressure(checked_views, policy):
    # long outputs under SGLang's partial reservation (no ignore_eos) in a small pool: decode runs out of memory
    # and retracts; a fan-out and a join move calls between the task's sets in both directions
    ag = {"a": Agent("a", 50), "b": Agent("b", 80)}
    nodes = {"x": CallNode("x", "a", 100, 300), "y": CallNode("y", "b", 60, 900, deps=("x",)),
             "z": CallNode("z", "b", 60, 700, deps=("x",)), "j": CallNode("j", "a", 40, 200, deps=("y", "z"))}
    wfs = [Workflow("w", ag, nodes) for _ in range(8)]
    e = run_sim(make_trace(wfs, [0.5 * i for i in range(8)]), policy, kv_pool_tokens=4000, host_cache_ratio=2.0,
                ignore_eos=False, max_new_tokens_cap=1000)
    assert e.tasks_done == len(wfs)
    assert e.stats.retractions + e.stats.preemptions > 0  # the call sets moved both ways between decisions
    assert checked_views["views"] > 20 and checked_views["waiting"] > 0 and checked_views["running"] > 0
