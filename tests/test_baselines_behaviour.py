"""Each prior-work baseline's defining behaviour on small hand-built views."""

import dataclasses
import math

import pytest
from conftest import make_view, req_info

from topas.policy import PrefixState, RequestFinished, RequestReady, TaskProgress, create_policy
from topas.workflow import Agent, TemplateStage, WorkflowTemplate


def template(name, stages, prefix=500):
    """stages: (stage id, agent, deps) triples."""
    agents = {a: Agent(a, prefix) for _, a, _ in stages}
    return WorkflowTemplate(name, agents, {s: TemplateStage(s, a, tuple(d)) for s, a, d in stages})


CHAIN = template("chain", [("a", "a", ()), ("b", "b", ("a",)), ("c", "c", ("b",))])
DIAMOND = template("dag4", [("s", "S", ()), ("l", "L", ("s",)), ("r", "R", ("s",)), ("j", "J", ("l", "r"))])


def progress(task_id, tpl, arrival=0.0, done=(), attained=0.0):
    return TaskProgress(task_id, tpl.name, arrival, finished_nodes=tuple(done), stage_done={s: 1 for s in done},
                        attained_service=attained)


def running(r, admitted=0.0):
    return dataclasses.replace(r, admitted_time=admitted)


def prefix(agent, tokens=500, where="gpu", pinned=False, in_use=False):
    return PrefixState(agent, tokens, tokens if where == "gpu" else 0, tokens if where == "host" else 0, pinned, in_use)


# ---------------------------------------------------------------------------------------------- dfs_weight
def test_dfs_weight_visits_the_heavier_subtree_first_and_cold_requests_last():
    w = [req_info("0:c", "c", 0), req_info("1:a", "a", 1, cached=500),
         req_info("2:b", "b", 2, cached=500), req_info("3:b", "b", 3, cached=500), req_info("4:b", "b", 4, cached=500)]
    d = create_policy("dfs_weight").schedule(make_view(w))
    assert d.admit == ("2:b", "3:b", "4:b", "1:a", "0:c") and d.stop_at_first_misfit
    # FCFS would have served the cold request first; LPM keeps queue order among equal matches
    assert create_policy("lpm").schedule(make_view(w)).admit[0] == "1:a"


def test_dfs_weight_is_post_order_and_splits_partial_matches():
    hist = ("t9:x:out", 200)
    deep = lambda rid, t: req_info(rid, "b", t, cached=700, prompt=800,  # noqa: E731
                                   segments=(("agent:b", 500), hist, (f"t{t}:in", 100)))
    w = [req_info("0:b", "b", 0, cached=500),  # ends at the agent-prefix node: after its children
         req_info("1:b", "b", 1, cached=300),  # ends inside the prefix: an ancestor, after everything below
         deep("2:b", 2), deep("3:b", 3),
         req_info("4:a", "a", 4, cached=500), req_info("5:a", "a", 5, cached=500)]
    d = create_policy("dfs_weight").schedule(make_view(w))
    # b subtree weight 4 > a subtree weight 2; inside b: the shared-history node (2) first
    assert d.admit == ("2:b", "3:b", "0:b", "1:b", "4:a", "5:a")


def test_dfs_weight_breaks_ties_in_queue_order_without_the_engine_tree():
    w = [req_info("0:a", "a", 0, cached=500), req_info("1:b", "b", 1, cached=500), req_info("2:a", "a", 2, cached=500),
         req_info("3:b", "b", 3, cached=500)]
    assert create_policy("dfs_weight").schedule(make_view(w)).admit == ("0:a", "2:a", "1:b", "3:b")


def test_dfs_weight_breaks_ties_in_the_engine_tree_child_order():
    # SGLang: equal-weight siblings keep the cache tree's child (insertion) order
    w = [dataclasses.replace(req_info("0:a", "a", 0, cached=500), cached_nodes=(7,)),
         dataclasses.replace(req_info("1:b", "b", 1, cached=500), cached_nodes=(3,))]
    assert create_policy("dfs_weight").schedule(make_view(w)).admit == ("1:b", "0:a")


def test_dfs_weight_puts_a_fully_cached_prompt_beside_its_extensions():
    # x is exactly the cached prefix P, y = P + fresh input: both end at P's node (SGLang: [x, y])
    x = req_info("0:x", "a", 0, cached=500, prompt=500, segments=(("agent:a", 500),))
    y = req_info("1:y", "a", 1, cached=500)
    assert create_policy("dfs_weight").schedule(make_view([x, y])).admit == ("0:x", "1:y")
    tree = [dataclasses.replace(x, cached_nodes=(1,)), dataclasses.replace(y, cached_nodes=(1,))]
    assert create_policy("dfs_weight").schedule(make_view(tree)).admit == ("0:x", "1:y")


def test_cache_aware_baselines_keep_sglangs_persistent_queue_order():
    # SGLang sorts its waiting list in place and appends arrivals: ties keep the last pass's order
    for name in ("lpm", "dfs_weight"):
        pol = create_policy(name)
        a, b = req_info("0:a", "a", 0), req_info("1:b", "b", 1, cached=200)
        assert pol.schedule(make_view([a, b])).admit == ("1:b", "0:a")
        b = dataclasses.replace(b, cached_tokens=0)  # evicted: now a tie
        c = req_info("2:c", "c", 2)
        assert pol.schedule(make_view([a, b, c])).admit == ("1:b", "0:a", "2:c"), name


# ---------------------------------------------------------------------------------------------- lpm
def test_lpm_key_counts_host_hits_and_is_capped_below_the_sequence_length():
    # SGLang's num_matched_prefix_tokens = min(device + host match, length - 1)
    x = req_info("0:x", "x", 0, cached=500, prompt=500, prefix=500)  # fully cached: key 499
    y = req_info("1:y", "y", 1, cached=499)  # key 499: ties with x, entry order kept
    z = dataclasses.replace(req_info("2:z", "z", 2, cached=200), host_cached_tokens=400)  # key 600
    assert create_policy("lpm").schedule(make_view([x, y, z])).admit == ("2:z", "0:x", "1:y")


def test_lpm_in_batch_check_is_token_exact_within_a_segment():
    # a holds only the first 20 tokens of segment s: b shares 20 < 32 tokens with it, not 500
    a = req_info("0:a", "a", 0, prefix=20, segments=(("s", 20), ("a:in", 980)))
    b = req_info("1:b", "b", 1, segments=(("s", 500), ("b:in", 500)))
    c = req_info("2:c", "c", 2, segments=(("s", 500), ("c:in", 500)))  # shares 500 with b: deferred
    d = req_info("3:d", "d", 3)
    assert create_policy("lpm").schedule(make_view([a, b, c, d])).admit == ("0:a", "1:b", "3:d", "2:c")


# ---------------------------------------------------------------------------------------------- spf
def test_spf_serves_the_task_with_least_estimated_remaining_work():
    w = [req_info("0:a", "a", 0, ready=0.0), req_info("1:c", "c", 1, ready=5.0)]
    tasks = {0: progress(0, CHAIN), 1: progress(1, CHAIN, done=("a", "b"))}
    v = make_view(w, tasks=tasks, templates={"chain": CHAIN})
    d = create_policy("spf").schedule(v)
    assert d.admit == ("1:c", "0:a")  # SRPT: the task one stage from done goes first, FCFS would not


def test_spf_learns_stage_lengths_online_not_from_the_truth():
    x = template("x", [("x", "x", ())])
    y = template("y", [("y", "y", ())])
    w = [req_info("0:x", "x", 0, ready=0.0), req_info("1:y", "y", 1, ready=1.0)]
    v = make_view(w, tasks={0: progress(0, x), 1: progress(1, y, arrival=1.0)}, templates={"x": x, "y": y})
    pol = create_policy("spf")
    assert pol.schedule(v).admit == ("0:x", "1:y")  # equal prior estimates: ready order
    done = req_info("9:x", "x", 9, stage="x")
    for _ in range(5):  # agent x turns out to write 4000-token answers, agent y 100-token ones
        pol.on_event(RequestFinished(2.0, done, 4000, 80.0, True))
    pol.on_event(RequestFinished(2.0, req_info("8:y", "y", 8, stage="y"), 100, 2.0, True))
    assert pol.schedule(v).admit == ("1:y", "0:x")


# ---------------------------------------------------------------------------------------------- parrot_fcfs
def test_parrot_serves_the_oldest_task_first_and_groups_shared_prefixes():
    w = [req_info("1:a", "a", 1, ready=5.0, arrival=5.0), req_info("0:b", "b", 0, ready=6.0, arrival=0.0),
         req_info("2:x", "x", 2, ready=7.0, arrival=6.0), req_info("3:a", "a", 3, ready=8.0, arrival=7.0)]
    d = create_policy("parrot_fcfs").schedule(make_view(w))
    # app FIFO: task 0 first although its call became ready last; task 3 shares task 1's prefix: grouped
    assert d.admit == ("0:b", "1:a", "3:a", "2:x") and d.stop_at_first_misfit
    no_ctx = create_policy("parrot_fcfs", {"ctx_group": False}).schedule(make_view(w))
    assert no_ctx.admit == ("0:b", "1:a", "2:x", "3:a")


def test_parrot_keeps_a_tasks_ready_calls_together():
    # task 0's two branches feed the same join: a graph group, which wins over prefix grouping
    w = [req_info("0:l", "L", 0, ready=1.0, arrival=0.0), req_info("1:l", "L", 1, ready=2.0, arrival=0.5),
         req_info("0:r", "R", 0, ready=3.0, arrival=0.0)]
    tasks = {0: progress(0, DIAMOND, done=("s",)), 1: progress(1, DIAMOND, arrival=0.5, done=("s",))}
    v = make_view(w, tasks=tasks, templates={"dag4": DIAMOND})
    assert create_policy("parrot_fcfs").schedule(v).admit == ("0:l", "0:r", "1:l")
    assert create_policy("parrot_fcfs", {"graph_group": False}).schedule(v).admit == ("0:l", "1:l", "0:r")


# ---------------------------------------------------------------------------------------------- autellix_las
def test_las_picks_the_program_with_least_attained_service():
    one = template("one", [("x", "x", ())])
    w = [req_info("0:x", "x", 0, ready=0.0), req_info("1:x", "x", 1, ready=1.0)]
    v = make_view(w, tasks={0: progress(0, one, attained=50.0), 1: progress(1, one, attained=0.5)},
                  templates={"one": one}, now=2.0)
    d = create_policy("autellix_las", {"mode": "plas"}).schedule(v)
    assert d.admit == ("1:x", "0:x") and d.preempt == ()


def test_atlas_priority_is_the_critical_path_service_of_finished_parents():
    pol = create_policy("autellix_las")
    s, l_ = running(req_info("0:s", "S", 0, stage="s"), 0.0), running(req_info("0:l", "L", 0, stage="l"), 2.0)
    v0 = make_view([req_info("0:s", "S", 0, stage="s")], tasks={0: progress(0, DIAMOND)}, templates={"dag4": DIAMOND})
    pol.schedule(v0)
    pol.on_event(RequestFinished(2.0, s, 10, 2.0, False))
    v1 = make_view([req_info("0:l", "L", 0, stage="l", ready=2.0), req_info("0:r", "R", 0, stage="r", ready=2.0)],
                   tasks={0: progress(0, DIAMOND, done=("s",), attained=2.0)}, templates={"dag4": DIAMOND}, now=2.0)
    pol.schedule(v1)
    pol.on_event(RequestFinished(32.0, l_, 10, 30.0, False))
    assert pol.calls["0:r"].priority == pytest.approx(2.0)  # the parallel branch l does not count
    v2 = make_view([req_info("0:j", "J", 0, stage="j", ready=40.0)], templates={"dag4": DIAMOND}, now=40.0,
                   tasks={0: progress(0, DIAMOND, done=("s", "l", "r"), attained=40.0)})
    r = running(req_info("0:r", "R", 0, stage="r", ready=2.0), 32.0)
    pol.on_event(RequestFinished(40.0, r, 10, 8.0, False))
    pol.schedule(v2)
    assert pol.calls["0:j"].priority == pytest.approx(max(2.0 + 30.0, 2.0 + 8.0))  # max over parents (p + t)
    assert pol.calls["0:j"].level == 5  # thresholds 1, 3, 7, 15, 31, 63: 32 s lies in [31, 63)


def test_las_demotes_by_quantum_and_preempts_a_lower_queue():
    one = template("one", [("x", "x", ())])
    run = running(req_info("0:x", "x", 0, ready=0.0), admitted=0.0)
    new = req_info("1:x", "x", 1, ready=10.0)
    v = make_view([new], running=[run], tasks={0: progress(0, one, attained=10.0), 1: progress(1, one)},
                  templates={"one": one}, now=10.0)
    v = dataclasses.replace(v, max_running_requests=1)  # the batch is full
    pol = create_policy("autellix_las")
    d = pol.schedule(v)
    assert pol.calls["0:x"].level == 3  # 10 s of service: quanta 1 + 2 + 4 exhausted
    assert d.preempt == ("0:x",) and d.admit == ("1:x",)
    # same levels: no preemption (strictly better queues only)
    pol2 = create_policy("autellix_las", {"first_quantum_s": 100.0})
    assert pol2.schedule(v).preempt == ()
    assert create_policy("autellix_las", {"preempt": False}).schedule(v).preempt == ()


def test_las_promotes_a_starving_program():
    one = template("one", [("x", "x", ())])
    old = req_info("0:x", "x", 0, ready=0.0)  # a long program, waiting for 1000 s
    fresh = req_info("1:x", "x", 1, ready=999.0)
    tasks = {0: progress(0, one, attained=100.0), 1: progress(1, one, attained=2.0)}
    v = make_view([old, fresh], tasks=tasks, templates={"one": one}, now=1000.0)
    assert create_policy("autellix_las", {"mode": "plas", "starvation_ratio": 1e9}).schedule(v).admit == ("1:x", "0:x")
    pol = create_policy("autellix_las", {"mode": "plas"})  # beta 8: 1000 s waited >= 8 x 100 s served
    assert pol.schedule(v).admit == ("0:x", "1:x") and pol.calls["0:x"].level == 0


# ---------------------------------------------------------------------------------------------- kvflow
def _kvflow_view(used, free_demand_waiting=()):
    tpl = template("chain", [("a", "a", ()), ("b", "b", ("a",)), ("c", "c", ("b",))])
    run = running(req_info("0:a", "a", 0, stage="a"), 0.0)
    prefixes = {"a": prefix("a", in_use=True), "b": prefix("b", where="host"), "c": prefix("c"), "d": prefix("d", 800)}
    return make_view(list(free_demand_waiting), running=[run], tasks={0: progress(0, tpl)}, templates={"chain": tpl},
                     prefixes=prefixes, kv=6000, used=used, evictable=1300)


def test_kvflow_pins_and_prefetches_the_agent_due_next_and_offloads_the_farthest():
    d = create_policy("kvflow").schedule(_kvflow_view(used=0))
    assert d.pin == {"a", "b"}  # a runs now, b is one step away (on host: pinning it prefetches it)
    assert d.offload == frozenset()  # no memory pressure: nothing is moved
    # the FCFS head needs more than the free KV: the agent no task needs goes first, the near ones stay
    v = _kvflow_view(used=4800, free_demand_waiting=[req_info("1:a", "a", 1, stage="a", cached=500, prompt=1700)])
    d = create_policy("kvflow").schedule(v)
    assert d.offload == {"d"} and d.pin == {"a", "b"}
    assert d.admit == ("1:a",) and d.stop_at_first_misfit  # FCFS admission
    # lookahead 2 also holds c
    assert create_policy("kvflow", {"lookahead": 2}).schedule(_kvflow_view(used=0)).pin == {"a", "b", "c"}


def test_kvflow_priority_is_soft_near_prefixes_yield_when_admission_needs_memory():
    big = [req_info(f"{i}:a", "a", i, stage="a", cached=500, prompt=1500) for i in range(1, 4)]
    d = create_policy("kvflow").schedule(_kvflow_view(used=3000, free_demand_waiting=big))
    assert d.pin == {"a"}  # prefetching b would take KV the queue head needs now: b stays evictable
    assert "d" in d.offload and "b" not in d.offload  # far first; b is never moved out proactively


def test_kvflow_offloads_far_agents_in_order_of_steps():
    v = _kvflow_view(used=5500, free_demand_waiting=[req_info("1:a", "a", 1, stage="a", cached=500, prompt=1000)])
    d = create_policy("kvflow").schedule(v)
    assert d.offload == {"d"}  # the shortfall (500 + 256 - 500 free) is covered by d alone
    v = _kvflow_view(used=5900, free_demand_waiting=[req_info("1:a", "a", 1, stage="a", prompt=2000)])
    assert create_policy("kvflow").schedule(v).offload == {"d", "c"}  # then c (2 steps) before b (1, pinned)


def test_kvflow_respects_the_pin_budget():
    d = create_policy("kvflow", {"lookahead": 2, "max_pin_fraction": 0.2}).schedule(_kvflow_view(used=0))
    assert sum(500 for _ in d.pin) <= 0.2 * 6000 and d.pin == {"a", "b"}


# ---------------------------------------------------------------------------------------------- continuum_ttl
REACT = template("react", [("t1", "a", ()), ("t2", "b", ("t1",)), ("t3", "a", ("t2",))])


def _finished_t1(pol, finish=10.0, queued=20.0):
    t1 = running(req_info("0:t1", "a", 0, stage="t1", ready=finish - queued - 5.0), finish - 5.0)
    pol.on_event(RequestFinished(finish, t1, 50, 5.0, False))


def _view(now, waiting=(), run=()):
    return make_view(list(waiting), running=list(run), tasks={0: progress(0, REACT, done=("t1",))},
                     templates={"react": REACT}, prefixes={"a": prefix("a"), "b": prefix("b")}, now=now)


def test_continuum_pins_a_finished_calls_prefix_until_its_ttl_expires():
    pol = create_policy("continuum_ttl")
    _finished_t1(pol, finish=10.0, queued=20.0)
    # cold start: Exp(1 s) pauses, benefit = queueing delay 20 s + host reload of 500 tokens
    reload = _view(0).costs.swap_time(500)
    tau = math.log(20.0 + reload)
    t2 = running(req_info("0:t2", "b", 0, stage="t2", ready=10.0), 10.0)
    assert pol.schedule(_view(10.0, run=[t2])).pin == {"a"}
    assert pol.schedule(_view(10.0 + tau - 0.01, run=[t2])).pin == {"a"}
    assert pol.schedule(_view(10.0 + tau + 0.01, run=[t2])).pin == frozenset()


def test_pins_never_keep_the_queue_head_out_of_an_idle_engine():
    pol = create_policy("continuum_ttl")
    _finished_t1(pol, finish=10.0, queued=20.0)
    # nothing runs and the head of the queue is another agent's call: only its own prefix may stay locked
    assert pol.schedule(_view(10.0, [req_info("0:t2", "b", 0, stage="t2", ready=10.0)])).pin == frozenset()


def test_continuum_does_not_pin_when_the_agent_does_not_come_back():
    pol = create_policy("continuum_ttl")
    t2 = dataclasses.replace(req_info("0:t2", "b", 0, stage="t2", ready=0.0), admitted_time=20.0)
    pol.on_event(RequestFinished(30.0, t2, 50, 10.0, False))  # b has no later stage in the task
    v = make_view([], tasks={0: progress(0, REACT, done=("t1", "t2"))}, templates={"react": REACT},
                  prefixes={"a": prefix("a"), "b": prefix("b")}, now=30.0)
    assert pol.schedule(v).pin == frozenset()


def test_continuum_serves_the_returning_call_first_then_program_fcfs():
    pol = create_policy("continuum_ttl")
    _finished_t1(pol, finish=10.0)
    busy = [running(req_info("7:z", "b", 7, stage="t2"), 0.0)]
    pol.schedule(_view(10.0, run=busy))
    back = req_info("0:t3", "a", 0, stage="t3", ready=11.0, arrival=0.0)
    older = req_info("5:x", "a", 5, stage="t1", ready=9.0, arrival=-5.0)
    pol.on_event(RequestReady(11.0, back))
    d = pol.schedule(_view(11.0, [older, back], busy))
    assert d.admit == ("0:t3", "5:x") and d.pin == {"a"}
    d = pol.schedule(_view(12.0, [older], busy))  # t3 admitted: the pin has done its job
    assert d.pin == frozenset()


def test_ttl_rule_on_an_empirical_pause_distribution():
    from baselines.continuum_ttl import ttl_from_samples

    # pauses of 1 s (half) and 10 s (half): with 4 s of benefit only the first is worth waiting for
    assert ttl_from_samples([1.0, 10.0] * 50, 4.0) == 1.0
    assert ttl_from_samples([1.0, 10.0] * 50, 40.0) == 10.0
    assert ttl_from_samples([5.0] * 10, 4.0) == 0.0
