"""End to end: the real sglang 0.5.23 server on CPU (tiny random-weight Qwen2), the
topas plugin inside its scheduler, the workflow driver as client.

One server for the module (started with `--max-running-requests 1`, so the service
order is the admission order); each test switches the plugin to the policy it needs
through a `topas.control/v1` request. The fixture's teardown stops the server and checks
that no process of it remains (no test has to run last)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sglang_support import ROOT as REPO  # noqa: E402
from sglang_support import require_sglang

require_sglang()

from topas.engines.sglang.client.driver import DriverConfig, run_trace_sync  # noqa: E402
from topas.engines.sglang.client.processes import processes_alive  # noqa: E402
from topas.engines.sglang.client.server import (  # noqa: E402
    ServerConfig,
    ServerStartError,
    SGLangNotInstalled,
    SGLangServer,
    check_sglang_importable,
)
from topas.workflow import Agent, CallNode, SegmentRef, Task, Trace, Workflow, template_of  # noqa: E402

pytestmark = pytest.mark.sglang

POLICIES = str(Path(__file__).with_name("policies_for_tests.py"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    out = tmp_path_factory.mktemp("sglang_e2e")
    cfg = ServerConfig(
        policy="fcfs",
        policy_modules=[POLICIES],
        decision_log=out / "decisions.jsonl",
        log_path=out / "server.log",
        max_running_requests=1,
        max_total_tokens=4096,
        cwd=REPO,
    )
    srv = SGLangServer(cfg).start()
    try:
        yield srv
    finally:
        pids = srv.pids()
        srv.stop()
    assert processes_alive(pids) == [] and not srv.alive(), "the server outlived stop()"


def records_of(server) -> list[dict]:
    return [json.loads(x) for x in Path(server.config.decision_log).read_text().splitlines()]


def run(server, trace: Trace, **kw) -> list[dict]:
    recs = run_trace_sync(trace, DriverConfig(base_url=server.base_url, vocab_size=1000, **kw))
    for r in recs:
        assert r["output_tokens"] == r["expected_output_tokens"], r
        assert r["finish_reason"] == "length", r
    return recs


def single_node_tasks(specs: list[tuple[int, float, str, str, int, int]], template: str) -> Trace:
    """Tasks of one call each: (task id, arrival, node, agent, prefix tokens, output tokens)."""
    tasks = []
    tpl = None
    for tid, arrival, node, agent, prefix, out in specs:
        wf = Workflow(template, {agent: Agent(agent, prefix)}, {node: CallNode(node, agent, 8, out, stage="s")})
        tpl = tpl or template_of(Workflow(template, {agent: Agent(agent, prefix)}, {"s": CallNode("s", agent, 8, out)}))
        tasks.append(Task(tid, arrival, wf, template))
    return Trace(template, tuple(tasks), {template: tpl})


def test_server_started_with_the_plugin(server):
    assert server.healthy()
    start = [r for r in records_of(server) if r["event"] == "start"]
    assert start and start[0]["policy"] == "fcfs" and start[0]["tree_cache"] == "UnifiedRadixCache"
    assert start[0]["max_running_requests"] == 1


def order_trace(tag: int) -> Trace:
    # a long call occupies the single running slot; four one-call tasks then queue up,
    # arriving in ascending node order
    specs = [(tag * 10, 0.0, "blocker", "Z", 16, 500)]
    specs += [(tag * 10 + i + 1, 0.25 + 0.05 * i, n, "W", 16, 4) for i, n in enumerate(["a", "b", "c", "d"])]
    return single_node_tasks(specs, f"order{tag}")


def assert_queue_formed(recs: list[dict]) -> None:
    blocker = next(r for r in recs if r["node"] == "blocker")
    late = max(r["ready"] for r in recs if r["node"] != "blocker")
    assert late < blocker["finish"], "machine too slow: the queue did not form while the blocker ran"


def test_service_order_follows_the_policy(server):
    server.set_policy("fcfs")
    fcfs = run(server, order_trace(1))
    assert_queue_formed(fcfs)
    assert [r["node"] for r in fcfs] == ["blocker", "a", "b", "c", "d"]

    server.set_policy("test_node_desc")
    desc = run(server, order_trace(2), hint_channel="custom_params")  # the fallback channel
    assert_queue_formed(desc)
    assert [r["node"] for r in desc] == ["blocker", "d", "c", "b", "a"]
    # the plugin's own record: admissions in the decision's order
    rids = {r["rid"]: r["node"] for r in desc}
    admitted = [rids[x] for rec in records_of(server) if rec["event"] == "admitted" for x in rec["rids"] if x in rids]
    assert admitted == ["blocker", "d", "c", "b", "a"]
    decisions = [rec for rec in records_of(server) if rec["event"] == "decision" and set(rec["waiting"]) & set(rids)]
    assert any(len(d["admit"]) == 4 and [rids[x] for x in d["admit"]] == ["d", "c", "b", "a"] for d in decisions)


def test_held_back_request_waits_and_is_served_later(server):
    server.set_policy("test_hold", {"prefix": "late"})
    specs = [(30, 0.0, "blocker", "Z3", 16, 400), (31, 0.2, "late", "W3", 16, 4),
             (32, 0.3, "a", "W3", 16, 4), (33, 0.35, "b", "W3", 16, 4)]
    recs = run(server, single_node_tasks(specs, "hold"))
    assert_queue_formed(recs)
    assert [r["node"] for r in recs] == ["blocker", "a", "b", "late"]


def test_preemption_requeues_and_resumes(server):
    server.set_policy("test_preempt")
    specs = [(60, 0.0, "victim", "Z6", 16, 300), (61, 0.3, "urgent", "W6", 16, 4)]
    recs = run(server, single_node_tasks(specs, "preempt"))
    assert [r["node"] for r in recs] == ["urgent", "victim"]
    victim = recs[1]
    assert victim["num_retractions"] == 1 and victim["output_tokens"] == 300
    preempted = [x for rec in records_of(server) if rec["event"] == "preempted" for x in rec["rids"]]
    assert preempted == [victim["rid"]]


def chain_trace() -> Trace:
    agents = {"P": Agent("P", 48), "Q": Agent("Q", 40)}
    nodes = {
        "n0": CallNode("n0", "P", 16, 12),
        "n1": CallNode("n1", "Q", 8, 10, deps=("n0",), history=(SegmentRef("out", "n0"),)),
        "n2": CallNode("n2", "P", 8, 6, deps=("n1",),
                       history=(SegmentRef("in", "n0"), SegmentRef("out", "n0"), SegmentRef("out", "n1"))),
    }
    tasks = tuple(Task(40 + i, 0.5 * i, Workflow("chain", agents, nodes), "chain") for i in range(2))
    return Trace("chain", tasks, {"chain": template_of(Workflow("chain", agents, nodes))})


def test_cached_tokens_match_the_prompt_segments(server):
    server.set_policy("fcfs")
    recs = {(r["task_id"], r["node"]): r for r in run(server, chain_trace(), hint_channel="both", stream=True)}
    for r in recs.values():
        assert r["ready"] < r["first_token"] <= r["finish"], r
        assert r["cached_tokens"] == r["predicted_reuse_tokens"], r
        assert (r["cached_tokens_device"] or 0) == r["cached_tokens"] and not r["cached_tokens_host"]
    # n2 reuses its agent prefix, n0's input and n0's generated output (but its last token)
    assert recs[(40, "n2")]["cached_tokens"] == 48 + 16 + 11
    assert recs[(40, "n0")]["cached_tokens"] == 0
    assert recs[(41, "n0")]["cached_tokens"] == 48  # the second task finds P's prefix
    assert recs[(41, "n1")]["cached_tokens"] == 40
    # the policy saw the workflow metadata of every call
    seen = {x for rec in records_of(server) if rec["event"] == "decision" for x in rec["waiting"]}
    assert {r["rid"] for r in recs.values()} <= seen


def diamond_trace(first_task: int) -> Trace:
    plan, work = f"plan{first_task}", f"work{first_task}"  # fresh prefixes for every replay
    agents = {plan: Agent(plan, 64), work: Agent(work, 48)}
    nodes = {
        "a": CallNode("a", plan, 24, 8),
        "b": CallNode("b", work, 16, 12, deps=("a",), history=(SegmentRef("out", "a"),)),
        "c": CallNode("c", work, 16, 6, deps=("a",), history=(SegmentRef("out", "a"),)),
        "d": CallNode("d", plan, 8, 4, deps=("b", "c"),
                      history=(SegmentRef("in", "a"), SegmentRef("out", "a"), SegmentRef("out", "b"), SegmentRef("out", "c"))),
    }
    wf = Workflow("diamond", agents, nodes)
    tasks = tuple(Task(first_task + i, 0.2 * i, wf, "diamond") for i in range(3))
    return Trace("diamond", tasks, {"diamond": template_of(wf)})


def _builtin_policies() -> list[str]:
    from topas.policy import builtin_policy_names

    return [n for n in builtin_policy_names() if "oracle" not in n]


@pytest.mark.parametrize("policy", _builtin_policies())
def test_dag_workload_completes_in_dependency_order(server, policy):
    server.set_policy(policy)
    first = 100 + 10 * _builtin_policies().index(policy)
    trace = diamond_trace(first)
    recs = {(r["task_id"], r["node"]): r for r in run(server, trace)}
    assert len(recs) == 12
    for task in trace.tasks:
        for node in task.workflow.nodes.values():
            me = recs[(task.task_id, node.id)]
            for d in node.deps:
                assert me["ready"] >= recs[(task.task_id, d)]["finish"], (me, d)
            # bound over every other call in any order (a policy may serve a later call first);
            # +1: with a 1000-token vocabulary a fresh segment's first token can equal a cached
            # sibling's, and SGLang matches token by token
            assert me["cached_tokens"] <= me["reuse_bound_tokens"] + 1, me
    # every task after the first finds the planner's prefix on device
    for i in (1, 2):
        assert recs[(first + i, "a")]["cached_tokens"] >= 64


def pressure_trace() -> Trace:
    agents = {"P2": Agent("P2", 256), "Q2": Agent("Q2", 256), "F": Agent("F", 1)}
    nodes = {"p1": CallNode("p1", "P2", 8, 2), "q1": CallNode("q1", "Q2", 8, 2)}
    flood = [f"f{i}" for i in range(6)]
    prev: tuple[str, ...] = ("p1", "q1")
    for f in flood:  # 6 x 900 tokens, one after another: more than the 4096-token pool
        nodes[f] = CallNode(f, "F", 900, 1, deps=prev)
        prev = (f,)
    nodes["p2"] = CallNode("p2", "P2", 8, 2, deps=prev)
    nodes["q2"] = CallNode("q2", "Q2", 8, 2, deps=prev)
    wf = Workflow("pressure", agents, nodes)
    return Trace("pressure", (Task(50, 0.0, wf, "pressure"),), {"pressure": template_of(wf)})


def test_pinned_prefix_survives_pressure_that_evicts_it_under_lru(server):
    server.set_policy("test_pin", {"agents": ["P2"]})
    recs = {r["node"]: r for r in run(server, pressure_trace())}
    assert recs["p2"]["cached_tokens"] == 256  # pinned agent prefix still on device
    assert recs["q2"]["cached_tokens"] == 0  # same history, not pinned: LRU evicted it
    decisions = [rec for rec in records_of(server) if rec["event"] == "decision" and rec["pin"] == ["P2"]]
    assert any(d["pinned"] == ["P2"] for d in decisions)
    server.set_policy("fcfs")  # releases the pin
    assert [rec for rec in records_of(server) if rec["event"] == "policy"][-1]["policy"] == "fcfs"


def test_unknown_policy_is_a_one_line_start_error(tmp_path):
    cfg = ServerConfig(policy="no_such_policy", log_path=tmp_path / "server.log", startup_timeout_s=120, cwd=REPO)
    srv = SGLangServer(cfg)
    with pytest.raises(ServerStartError) as e:
        srv.start()
    msg = str(e.value)
    assert "\n" not in msg and "unknown scheduler 'no_such_policy'" in msg and "server.log" in msg
    assert srv.proc is None


def test_missing_sglang_is_a_one_line_error(tmp_path):
    bare = tmp_path / "bare"
    import venv

    venv.EnvBuilder(with_pip=False).create(bare)
    with pytest.raises(SGLangNotInstalled, match="make sglang-cpu"):
        check_sglang_importable(str(bare / "bin" / "python"))
    check_sglang_importable(sys.executable)


def test_the_server_runs_its_processes(server):
    pids = server.pids()
    assert len(pids) >= 3 and processes_alive(pids) == pids  # launcher + scheduler + detokenizer at least
