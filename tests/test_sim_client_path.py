"""The simulator's model of a real server's client path (SimEngineConfig.client, a
ClientPath, off by default), and `backend=sim backend.latency=profile` through the runner
(the profile's client round trip applied unless configured)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import chain_workflow, engine_config, make_trace, run_sim
from hydra import compose, initialize_config_dir

from topas.engines.latency.measured import FORMAT
from topas.engines.latency.specs import repo_conf_dir
from topas.engines.sim.config import ClientPath
from topas.runner import run


def test_submit_and_return_latency_shift_the_client_view_and_release_successors_later():
    trace = make_trace([chain_workflow()], [1.0])
    base = run_sim(trace)
    slow = run_sim(trace, client=ClientPath(submit=0.003, return_=0.001))
    b = {r.node: r for r in base.requests}
    s = {r.node: r for r in slow.requests}
    # ready = the client's release; the engine admits it submit_latency_s later
    assert s["a"].ready_time == b["a"].ready_time == 1.0
    assert s["a"].first_admit_time == pytest.approx(b["a"].first_admit_time + 0.003)
    # finish = the client has the answer; its successor is released then, and submitted after that
    assert s["a"].finish_time == pytest.approx(b["a"].finish_time + 0.004)
    assert s["b"].ready_time == pytest.approx(s["a"].finish_time)
    assert s["b"].first_admit_time == pytest.approx(s["b"].ready_time + 0.003)
    # a chain of three calls: three round trips on the task's critical path
    jct = lambda e: next(iter(e.tasks.values())).finish_time - 1.0  # noqa: E731
    assert jct(slow) == pytest.approx(jct(base) + 3 * 0.004)


def test_by_default_the_client_path_adds_nothing():
    """The default engine has no client path: an idle engine admits a call the moment it is
    released, a successor is released the moment its predecessor's answer is back, and the
    answer is back with the last token. Against a client path of one microsecond each way,
    every one of those gaps moves by exactly that microsecond, so a nonzero default would show."""
    trace = make_trace([chain_workflow(), chain_workflow()], [0.0, 30.0])  # task 1 finds an idle engine

    def gaps(e):
        r = {(x.task.task.task_id, x.node): x for x in e.requests}
        admit = [r[(t, "a")].first_admit_time - r[(t, "a")].ready_time for t in (0, 1)]
        release = [r[(t, n)].ready_time - r[(t, p)].finish_time for t in (0, 1) for p, n in (("a", "b"), ("b", "c"))]
        answer = {k: x.finish_time - x.first_token_time for k, x in r.items()}
        return admit, release, answer

    assert engine_config().client == ClientPath(0.0, 0.0, 0.0, 0.0, 0.0)
    admit, release, answer = gaps(run_sim(trace))
    assert admit == [0.0, 0.0] and release == [0.0] * 4
    admit1, release1, answer1 = gaps(run_sim(trace, client=ClientPath(submit=1e-6, return_=1e-6)))
    assert admit1 == pytest.approx([1e-6, 1e-6], abs=1e-12) and release1 == [0.0] * 4
    assert [answer1[k] - answer[k] for k in answer] == pytest.approx([1e-6] * len(answer), abs=1e-12)


def test_negative_or_unknown_terms_are_rejected():
    with pytest.raises(ValueError, match="must be >= 0"):
        ClientPath(submit=-1.0)
    with pytest.raises(ValueError, match="unknown key"):
        ClientPath.from_mapping({"send": 1.0})
    assert ClientPath.from_mapping({"return": 0.5}).return_ == 0.5


PROFILE = {
    "format": FORMAT,
    "prefill": {"extend_tokens": [16, 4096], "prefix_tokens": [0, 4096], "seconds": [[0.004, 0.02], [0.1, 0.2]]},
    "decode": {"batch_size": [1, 64], "context_tokens": [16, 4096], "seconds": [[0.002, 0.004], [0.01, 0.05]]},
    "request_latency_s": {"submit": 0.004, "return": 0.002},
}


def _run(tmp_path, name, *extra):
    with initialize_config_dir(version_base=None, config_dir=str(repo_conf_dir())):
        cfg = compose(config_name="config", overrides=[
            "logger=none", "progress=false", "backend=sim", "model=tiny_cpu", "workload=dag4",
            "workload.num_tasks=3", "workload.arrival_rate=1", "backend.kv_pool_tokens=60000",
            "backend.latency=profile", f"backend.latency_profile={tmp_path / 'p.json'}", *extra])
    out, summary = run(cfg, out_dir=tmp_path / name, quiet=True)
    return pd.read_parquet(out / "requests.parquet"), summary


def test_runner_uses_the_profile_and_its_client_round_trip(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(PROFILE))
    req, summary = _run(tmp_path, "a")
    assert summary["num_tasks"] == 3
    first = req.sort_values("ready").iloc[0]
    assert first["first_admit"] - first["ready"] == pytest.approx(0.004)  # idle engine: only the submit path
    req0, _ = _run(tmp_path, "b", "backend.client_latency={}")
    first0 = req0.sort_values("ready").iloc[0]
    assert first0["first_admit"] == pytest.approx(first0["ready"])
    assert (req["finish"] - req["ready"]).mean() > (req0["finish"] - req0["ready"]).mean()


def test_calls_due_together_are_released_one_dispatch_interval_apart():
    trace = make_trace([chain_workflow(), chain_workflow(), chain_workflow()], [0.0, 0.0, 0.0])
    eng = run_sim(trace, client=ClientPath(dispatch=0.001, dispatch_per_token=1e-6))
    firsts = sorted(r.ready_time for r in eng.requests if r.node == "a")
    step = 0.001 + 1e-6 * 600  # chain_workflow: call a's prompt = 500 prefix + 100 input tokens
    assert firsts == pytest.approx([0.0, step, 2 * step])


def test_a_call_released_later_does_not_hold_back_one_released_earlier():
    """The serial client sends in release order, not in the order the calls became due."""
    from dataclasses import replace

    wf = chain_workflow()
    late = replace(wf, nodes={**wf.nodes, "a": replace(wf.nodes["a"], gap_s=5.0)})
    trace = make_trace([late, chain_workflow()], [0.0, 1.0])
    eng = run_sim(trace, client=ClientPath(dispatch=0.001))
    ready = {(r.task.task.task_id, r.node): r.ready_time for r in eng.requests}
    assert ready[(1, "a")] == pytest.approx(1.0) and ready[(0, "a")] == pytest.approx(5.0)


def test_submit_grows_with_the_prompt():
    trace = make_trace([chain_workflow()], [0.0])
    eng = run_sim(trace, client=ClientPath(submit=0.001, submit_per_token=1e-6))
    a = next(r for r in eng.requests if r.node == "a")
    assert a.first_admit_time - a.ready_time == pytest.approx(0.001 + 600e-6)
