"""Phase-batch (baselines/phase_batch.py): the agent-phase rule, its starvation limit, blindness
to true output lengths, and bounded waits with the limit where the phase rule alone starves."""

import dataclasses
import random
from pathlib import Path

import pytest
from conftest import Recorder, check_run, lengthen_outputs, make_trace, make_view, random_agents, random_dag, req_info, run_sim
from hydra import compose, initialize_config_dir

from baselines.phase_batch import PhaseBatch, phase_order
from topas.policy import Decision, create_policy
from topas.workflow import Agent, CallNode, Workflow

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def running(r, admitted=0.0):
    return dataclasses.replace(r, admitted_time=admitted)


def decide(waiting, run=(), now=0.0, **params):
    return create_policy("phase_batch", params or {"starvation_limit_s": None}).schedule(
        make_view(waiting, running=run, now=now))


def admit(waiting, run=(), now=0.0, **params):
    return decide(waiting, run, now, **params).admit


# ---------------------------------------------------------------------------------------------- the phase rule
def test_a_running_agents_call_goes_before_an_older_tasks_call_of_another_agent():
    run = [running(req_info("5:a", "A", 5, arrival=5.0))]
    old_b = req_info("0:b", "B", 0, arrival=0.0, ready=0.0)
    new_a = req_info("1:a", "A", 1, arrival=1.0, ready=1.0)
    # B is not opened while a call of the running agent A waits; app-FIFO would put task 0 first
    assert admit([old_b, new_a], run) == ("1:a",)
    assert create_policy("parrot_fcfs").schedule(make_view([old_b, new_a], running=run)).admit[0] == "0:b"


def test_a_new_agent_opens_only_when_no_running_agents_call_waits():
    run = [running(req_info("5:a", "A", 5, arrival=5.0))]
    w = [req_info("2:c", "C", 2, arrival=2.0), req_info("0:b", "B", 0, arrival=0.0),
         req_info("3:b", "B", 3, arrival=3.0), req_info("1:c", "C", 1, arrival=1.0)]
    # nothing of A waits: the agent of the oldest waiting call (task 0: B) opens, with all its calls
    assert admit(w, run) == ("0:b", "3:b")
    assert admit(w) == ("0:b", "3:b")  # an idle engine likewise opens one agent
    assert admit(w + [req_info("9:a", "A", 9, arrival=9.0)], run) == ("9:a",)
    assert admit([]) == ()


def test_within_the_phase_calls_go_in_task_arrival_order():
    run = [running(req_info("7:a", "A", 7, arrival=7.0)), running(req_info("8:b", "B", 8, arrival=8.0))]
    w = [req_info("3:a", "A", 3, arrival=3.0, ready=1.0), req_info("2:b", "B", 2, arrival=2.0, ready=2.0),
         req_info("1:a", "A", 1, arrival=1.0, ready=3.0), req_info("0:c", "C", 0, arrival=0.0),
         req_info("4:x", "A", 4, arrival=2.0, ready=0.5)]  # same task arrival as 2:b, ready earlier
    assert admit(w, run) == ("1:a", "4:x", "2:b", "3:a")
    # ties in task arrival and ready time: task id, then rid
    tie = [req_info("6:y", "A", 6, arrival=1.0, ready=1.0), req_info("5:z", "A", 5, arrival=1.0, ready=1.0),
           req_info("5:y", "A", 5, arrival=1.0, ready=1.0)]
    assert admit(tie, run) == ("5:y", "5:z", "6:y")


# ---------------------------------------------------------------------------------------------- starvation limit
def test_a_call_waiting_longer_than_the_limit_jumps_ahead_of_the_phase():
    run = [running(req_info("9:a", "A", 9, arrival=9.0))]
    w = [req_info("4:a", "A", 4, arrival=4.0, ready=95.0), req_info("2:c", "C", 2, arrival=2.0, ready=30.0),
         req_info("3:b", "B", 3, arrival=3.0, ready=10.0), req_info("1:d", "D", 1, arrival=1.0, ready=40.0)]
    # waited 90 s (B) and 70 s (C) > 60 s: first, in task-arrival order; D waited exactly 60 s: not yet
    d = decide(w, run, now=100.0, starvation_limit_s=60.0)
    assert d.admit == ("2:c", "3:b", "4:a")
    assert d.stop_at_first_misfit  # nothing overtakes a starved call that does not fit yet
    assert not decide(w, run, now=100.0, starvation_limit_s=95.0).stop_at_first_misfit
    assert admit(w, run, now=100.0, starvation_limit_s=None) == ("4:a",)
    assert admit(w, run, now=100.0, starvation_limit_s=float("inf")) == ("4:a",)
    assert admit(w, run, now=100.0, starvation_limit_s=0.0) == ("1:d", "2:c", "3:b", "4:a")
    # starved calls listed, nothing of a running agent waits: the oldest non-starved call's agent opens
    assert admit(w[1:], run, now=100.0, starvation_limit_s=65.0) == ("2:c", "3:b", "1:d")


def test_the_nolimit_reference_and_the_configs():
    assert create_policy("phase_batch_nolimit").params.starvation_limit_s is None
    assert create_policy("phase_batch").params.starvation_limit_s is not None
    with pytest.raises(ValueError):
        create_policy("phase_batch", {"starvation_limit_s": -1.0})
    with initialize_config_dir(version_base=None, config_dir=CONF):
        for name, limit in (("phase_batch", create_policy("phase_batch").params.starvation_limit_s),
                            ("phase_batch_nolimit", None)):
            cfg = compose(config_name="config", overrides=[f"scheduler={name}"]).scheduler
            pol = create_policy(cfg.name, dict(cfg.params))
            assert cfg.name == name and pol.params.starvation_limit_s == limit and not pol.oracle


# ---------------------------------------------------------------------------------------------- blindness
@pytest.mark.parametrize("limit", [None, 0.3])
def test_decisions_do_not_depend_on_pending_true_output_lengths(limit):
    # as tests/test_baselines_blind.py, with the starvation limit active before the horizon
    rng = random.Random(11)
    agents = random_agents(rng, 3)
    wfs = [random_dag(rng, rng.randint(2, 5), agents, f"w{i}") for i in range(10)]
    wfs[0] = Workflow("w0", agents, {"n0": CallNode("n0", "ag0", 20, 3), "n1": CallNode("n1", "ag1", 20, 4, deps=("n0",))})
    base = make_trace(wfs, [0.1 * i for i in range(10)])
    odd = {t.task_id for t in base.tasks if t.task_id % 2}
    changed = {f"{t.task_id}:{n}" for t in base.tasks if t.task_id in odd for n in t.workflow.nodes}
    runs = []
    for tr in (base, lengthen_outputs(base, odd, 137)):
        rec = Recorder(create_policy("phase_batch", {"starvation_limit_s": limit}))
        e = run_sim(tr, rec, ignore_eos=False, max_new_tokens_cap=1024, kv_pool_tokens=12000)
        check_run(e)
        runs.append((rec, min(r.finish_time for r in e.requests if r.rid in changed)))
    horizon = min(fc for _, fc in runs)
    before = [[d for t, d in rec.decisions if t < horizon] for rec, _ in runs]
    assert len(before[0]) >= 5 and before[0] == before[1]


# ---------------------------------------------------------------------------------------------- starvation
def _busy_agent_trace(n_loops, loop_len, b_input, b_every=2.0, b_until=60.0, seed=0):
    """Agent A: `n_loops` tasks at t=0, each a chain of `loop_len` A calls (a ReAct loop, no gap), more
    than fit at once, so an A call waits all the time they last. Agent B: one-call tasks arriving every
    `b_every` s. The phase rule never opens B while A's loops run."""
    rng = random.Random(seed)
    agents = {"A": Agent("A", 300), "B": Agent("B", 300)}
    loops = [Workflow("loop", agents, {f"a{i}": CallNode(f"a{i}", "A", rng.randint(20, 80), rng.randint(10, 80),
                                                         deps=(f"a{i - 1}",) if i else ()) for i in range(loop_len)})
             for _ in range(n_loops)]
    one = Workflow("one", agents, {"b": CallNode("b", "B", b_input, 40)})
    n_b = int(b_until / b_every)
    return make_trace(loops + [one] * n_b, [0.0] * n_loops + [b_every * (i + 1) for i in range(n_b)])


def _max_waits(e):
    waits = {"A": 0.0, "B": 0.0}
    for r in e.requests:
        waits[r.agent] = max(waits[r.agent], r.first_admit_time - r.ready_time)
    service = max(r.finish_time - r.first_admit_time for r in e.requests)
    return waits, service, max(r.finish_time for r in e.requests)


class _SkipStarved(PhaseBatch):
    """The same list, but a starved call that does not fit is skipped like any other."""

    def schedule(self, view):
        return Decision(admit=phase_order(view, self.params.starvation_limit_s)[0], stop_at_first_misfit=False)


# slots: four request slots, six loops; memory: a 2500-token KV pool, 20 loops of small A calls and
# large B calls (about 1800 tokens) that fit only once several A calls have left
SCENARIOS = {"slots": (dict(n_loops=6, loop_len=60, b_input=50), dict(max_running_requests=4)),
             "memory": (dict(n_loops=20, loop_len=40, b_input=1500), dict(kv_pool_tokens=2500))}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_with_its_limit_no_call_waits_unboundedly_while_the_phase_rule_alone_starves(scenario):
    limit = 5.0
    trace_kw, engine_kw = SCENARIOS[scenario]
    trace = _busy_agent_trace(**trace_kw)
    nolimit = run_sim(trace, "phase_batch_nolimit", **engine_kw)
    check_run(nolimit)
    waits, _, makespan = _max_waits(nolimit)
    # without the limit B waits until A's loops drain: as long as the overload lasts, not a bounded time
    assert waits["B"] > 0.5 * makespan and waits["B"] > 6 * limit
    limited = run_sim(trace, create_policy("phase_batch", {"starvation_limit_s": limit}), **engine_kw)
    check_run(limited)
    waits, service, _ = _max_waits(limited)
    assert max(waits.values()) <= limit + service  # starved: admitted when the next running call leaves
    assert 0.5 * limit < waits["B"]  # and the phase rule still holds B back up to the limit
    if scenario == "memory":  # had the walk skipped a starved call that does not fit, A's calls would refill
        skipping = run_sim(trace, _SkipStarved(PhaseBatch.Params(limit)), **engine_kw)  # the freed KV first
        assert _max_waits(skipping)[0]["B"] > 6 * limit
