"""Every registered scheduler runs end to end on the simulator, satisfies the engine invariants,
and never reads the true output lengths of calls that have not finished. The list comes from
the registry: a new scheduler module is covered without editing this file."""

import dataclasses
import random

import pytest
from conftest import Recorder, check_run, lengthen_outputs, make_trace, random_agents, random_dag, run_sim

from topas.policy import RequestInfo, SchedulerView, builtin_policy_names, create_policy
from topas.workflow import CallNode, Workflow

SCHEDULERS = builtin_policy_names()


def random_trace(seed: int, gap: float = 0.0, n_tasks: int | None = None):
    rng = random.Random(seed)
    agents = random_agents(rng, rng.randint(1, 4))
    wfs = []
    for i in range(n_tasks or rng.randint(2, 12)):
        w = random_dag(rng, rng.randint(1, 7), agents, f"w{i}")
        if gap:
            w = Workflow(w.name, w.agents, {k: dataclasses.replace(n, gap_s=gap) for k, n in w.nodes.items()})
        wfs.append(w)
    arrivals = sorted(rng.choice([0.0, rng.uniform(0, 5)]) for _ in wfs)
    return make_trace(wfs, arrivals), rng


@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_runs_end_to_end_and_keeps_the_invariants(name):
    for seed in range(12):
        trace, rng = random_trace(seed, gap=[0.0, 0.3][seed % 2])
        e = run_sim(trace, name, kv_pool_tokens=rng.choice([3000, 6000, 20000]),
                    host_cache_ratio=rng.choice([0.0, 2.0]), max_running_requests=rng.choice([4, 64]))
        check_run(e)


def test_the_view_carries_no_output_lengths():
    fields = {f.name for f in dataclasses.fields(RequestInfo)} | {f.name for f in dataclasses.fields(SchedulerView)}
    assert not fields & {"output_tokens", "max_new_tokens", "remaining_tokens"}


@pytest.mark.parametrize("name", SCHEDULERS)
def test_decisions_do_not_depend_on_pending_true_output_lengths(name):
    # Two traces identical except the true output lengths of the odd tasks' calls. Clients do not
    # send exact lengths (ignore_eos off, one max_new_tokens cap for all), so until the first of those
    # calls finishes the engine is in the same state in both runs: every decision taken before then,
    # including after the even tasks' calls have finished and been learned from, must be identical.
    rng = random.Random(7)
    agents = random_agents(rng, 3)
    wfs = [random_dag(rng, rng.randint(2, 5), agents, f"w{i}") for i in range(10)]
    early = {"n0": CallNode("n0", "ag0", 20, 3), "n1": CallNode("n1", "ag1", 20, 4, deps=("n0",))}
    wfs[0] = Workflow("w0", agents, early)  # finishes early: the policies learn before the horizon
    base = make_trace(wfs, [0.1 * i for i in range(10)])
    odd = {t.task_id for t in base.tasks if t.task_id % 2}
    other = lengthen_outputs(base, odd, 137)
    changed = {f"{t.task_id}:{n}" for t in base.tasks if t.task_id in odd for n in t.workflow.nodes}
    runs = []
    for tr in (base, other):
        rec = Recorder(create_policy(name))
        e = run_sim(tr, rec, ignore_eos=False, max_new_tokens_cap=1024, kv_pool_tokens=12000)
        check_run(e)
        first_changed = min(r.finish_time for r in e.requests if r.rid in changed)
        runs.append((rec, first_changed))
    horizon = min(fc for _, fc in runs)
    before = [[d for t, d in rec.decisions if t < horizon] for rec, _ in runs]
    assert len(before[0]) >= 5 and any(t < horizon for t in runs[0][0].finished)  # learned something first
    assert before[0] == before[1]
