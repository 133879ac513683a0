"""TOPAS robustness: no stall where FCFS finishes, no waiting call left unscored behind resident agents."""

import random

import pytest
from conftest import make_trace, random_agents, random_dag, run_sim
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from topas.engines.sim.engine import EngineStall
from topas.scheduler.ordering import small_prefix_calls
from topas.scheduler.pack import greedy_pack
from topas.scheduler.problem import AgentOption, Problem, RunningOption
from topas.scheduler.score import score_state
from topas.scheduler.search import search

# Two tasks that stalled TOPAS on the default engine (Qwen2.5-32B on A100-80GB, 22,035-token pool):
# an idle prefix pinned for a blocked call held memory a lone long-running call needed.
STALL_TRACE = """\
{"format": "topas-trace", "version": 1, "name": "fz165", "agents": {"A0": 4140, "A1": 3, "A2": 112}}
{"task_id": 0, "arrival": 0.0, "nodes": [{"id": "n1", "agent": "A0", "input_tokens": 2, "output_tokens": 7214, "deps": [], "history": [], "gap_s": 0.0}]}
{"task_id": 1, "arrival": 1.2710429771728435, "nodes": [{"id": "n0", "agent": "A0", "input_tokens": 6667, "output_tokens": 1, "deps": [], "history": [], "gap_s": 0.0}, {"id": "n1", "agent": "A2", "input_tokens": 2, "output_tokens": 21435, "deps": [], "history": [], "gap_s": 0.0}, {"id": "n2", "agent": "A1", "input_tokens": 1, "output_tokens": 20835, "deps": [], "history": [], "gap_s": 0.0}]}
"""


def _run_default_engine(trace_path, scheduler: str):
    """One run on the simulator's default engine and latency model (as run.py builds it)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (config resolvers)
    from topas.engines.sim.backend import run_sim as runner_run_sim
    from topas.runner import RunContext, prepare

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(version_base=None, config_dir=conf):
        cfg = compose("config", overrides=[f"scheduler={scheduler}", "workload=trace", f"workload.params.path={trace_path}",
                                           "logger=none"])
    plan = prepare(cfg)
    ctx = RunContext(plan.groups["backend"], plan.model, plan.gpu, plan.groups["scheduler"], plan.policy, plan.trace,
                     0.0, Path(trace_path).parent)
    record, _ = runner_run_sim(ctx)
    return record


@pytest.mark.parametrize("scheduler", ["fcfs", "topas"])
def test_the_stall_trace_completes(tmp_path, scheduler):
    path = tmp_path / "fz165.jsonl"
    path.write_text(STALL_TRACE)
    record = _run_default_engine(path, scheduler)
    assert len(record.tasks) == 2 and record.tasks["finish"].notna().all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1_000_000), pool=st.integers(1500, 8000), n_agents=st.integers(1, 4),
       n_tasks=st.integers(1, 6))
def test_whatever_fcfs_completes_topas_completes(seed, pool, n_agents, n_tasks):
    rng = random.Random(seed)
    agents = random_agents(rng, n_agents)
    wfs = [random_dag(rng, rng.randint(1, 4), agents, f"w{i}") for i in range(n_tasks)]
    tr = make_trace(wfs, sorted(rng.uniform(0, 5) for _ in wfs))
    try:
        run_sim(tr, "fcfs", kv_pool_tokens=pool)
    except (EngineStall, RuntimeError):
        assume(False)
    eng = run_sim(tr, "topas", kv_pool_tokens=pool)
    assert eng.tasks_done == len(tr.tasks)


# ---------------------------------------------------------------- the search on hand-built states
def _ag(name, tokens, forced=False, on_gpu=True, move_in=0.0, reuse_n=0, reload_s=0.1):
    return AgentOption(name, tokens, forced, on_gpu, move_in, reuse_n, reload_s)


def _problem(agents, waiting, kv_pool_tokens, base=0, running=None, overdue=()):
    """waiting: {rid: (agent, task, tokens, gain)}; each task's chain is its calls by gain."""
    by_task = {}
    for rid, (a, t, _, g) in waiting.items():
        by_task.setdefault(t, []).append((rid, a, g))

    def chain(t, elig):
        return sorted(((rid, g) for rid, a, g in by_task[t] if a in elig), key=lambda x: -x[1])

    return Problem(kv_pool_tokens=kv_pool_tokens, base_tokens=base, agents={a.name: a for a in agents},
                   request_agent={r: v[0] for r, v in waiting.items()}, request_task={r: v[1] for r, v in waiting.items()},
                   request_tokens={r: v[2] for r, v in waiting.items()},
                   task_agents={t: frozenset(a for _, a, _ in rs) for t, rs in by_task.items()},
                   chain=chain, swap_s_per_token=1e-5, max_actions=64,
                   running=(lambda: running) if running is not None else None, overdue=frozenset(overdue))


def test_an_overdue_call_outside_every_feasible_resident_set_is_scored_and_admitted_when_worth_more():
    # the batch of agent b fills the pool: no R' with the join agent j is feasible
    agents = [_ag("b", 2000, forced=True), _ag("j", 3000)]
    waiting = {"join": ("j", 0, 1000, 40.0), "more_b": ("b", 1, 1000, 1.0)}
    plan = search(_problem(agents, waiting, kv_pool_tokens=12_000, base=9_500), 6)
    assert (40.0, "join") not in plan.blocked  # before it is overdue, R' decides (locality)
    plan = search(_problem(agents, waiting, kv_pool_tokens=12_000, base=9_500, overdue={0}), 6)
    assert plan.admit == [] and (40.0, "join") in plan.blocked  # scored: it keeps its place by gain
    # a running call whose redo + revoke is below the join's gain makes room for it and its prefix
    cheap = [RunningOption("b_run", 2, 6000, 5.0, 0.0)]
    plan = search(_problem(agents, waiting, kv_pool_tokens=12_000, base=9_500, running=cheap, overdue={0}), 6)
    assert "join" in plan.admit and plan.preempt_rids == ["b_run"] and "j" in plan.resident
    assert plan.memory <= 12_000
    # with room for it, it is admitted outright and its prefix enters R' (and the score, once)
    p = _problem(agents, waiting, kv_pool_tokens=20_000, base=9_500, overdue={0})
    plan = greedy_pack(p, frozenset({"b"}))
    assert "join" in plan.admit and "j" in plan.resident and plan.memory == 9_500 + 2000 + 3000 + 1000 + 1000
    assert plan.score == pytest.approx(score_state(p, plan.resident, plan.admit, plan.gains, plan.memory).total)


def test_the_policy_lists_an_overdue_downstream_call_first_when_it_is_worth_more():
    from dataclasses import replace

    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress, create_policy
    from topas.workflow import Agent, TemplateStage, WorkflowTemplate

    tpl = WorkflowTemplate("w", {"s": Agent("s", 400), "j": Agent("j", 600)},
                           {"S": TemplateStage("S", "s"), "J": TemplateStage("J", "j", ("S",))})
    # task 0 (old) has waited long at its join J; tasks 1.. (newer) wait at S, whose agent is running
    waiting = [req_info("0:J", "j", 0, prompt=700, prefix=600, ready=5.0, arrival=0.0, stage="J")]
    waiting += [req_info(f"{i}:S", "s", i, prompt=500, prefix=400, ready=float(i), arrival=float(i), stage="S")
                for i in range(1, 6)]
    running = [replace(req_info("9:S", "s", 9, prompt=500, prefix=400, arrival=9.0, stage="S", generated=10),
                       admitted_time=9.0)]
    tasks = {i: TaskProgress(i, "w", float(i), stage_done={"S": 1} if i == 0 else {}) for i in range(0, 6)}
    tasks[9] = TaskProgress(9, "w", 9.0)
    prefixes = {"s": PrefixState("s", 400, 400, 0, False, True), "j": PrefixState("j", 600, 0, 0, False, False)}
    view = make_view(waiting, running, tasks, {"w": tpl}, prefixes, now=100.0, kv=3000, used=900)
    d = create_policy("topas").schedule(view)
    assert d.admit[0] == "0:J"
    assert set(d.admit) == {r.rid for r in waiting}  # work-conserving: every waiting call is listed


def test_a_call_outside_r_prime_is_listed_by_its_gain_only_when_its_prefix_is_smaller_than_its_kv():
    # agent b's batch fills the pool; the join's agent is outside every feasible R'
    waiting = {"join": ("j", 0, 1000, 40.0), "more_b": ("b", 1, 1000, 1.0)}
    small = _problem([_ag("b", 2000, forced=True), _ag("j", 50)], waiting, kv_pool_tokens=12_000, base=11_500)
    plan = search(small, 6)
    assert "j" not in plan.resident and "join" not in plan.admit
    assert small_prefix_calls(small, plan.resident, {}) == [(40.0, "join")]
    assert small_prefix_calls(small, plan.resident, {"join": 40.0}) == []  # already listed: keeps its place
    large = _problem([_ag("b", 2000, forced=True), _ag("j", 3000)], waiting, kv_pool_tokens=12_000, base=11_500)
    assert small_prefix_calls(large, search(large, 6).resident, {}) == []  # its prefix's room is what R' saves


def test_two_overdue_calls_of_one_agent_outside_r_prime_are_charged_its_prefix_once():
    # room for both calls and one copy of j's prefix, not two: the second call rides on the prefix the first brings in
    agents = [_ag("b", 2000, forced=True), _ag("j", 3000)]
    waiting = {"j1": ("j", 0, 1000, 40.0), "j2": ("j", 1, 1000, 30.0)}
    p = _problem(agents, waiting, kv_pool_tokens=2000 + 3000 + 1000 + 1000, overdue={0, 1})
    plan = greedy_pack(p, frozenset({"b"}))
    assert plan.admit == ["j1", "j2"] and plan.blocked == [] and plan.memory == p.kv_pool_tokens


def test_a_fan_out_pair_is_popped_by_its_tasks_value_not_by_its_first_branchs_own_gain():
    # task 0's two branches: the first alone gains little (its sibling still waits), the pair gains 10;
    # task 1's entry call gains 6. Room for two calls.
    chains = {0: [("l0", 1.0), ("r0", 9.0)], 1: [("s1", 6.0)]}
    agents = {a: _ag(a, 0) for a in ("L", "R", "S")}
    p = Problem(kv_pool_tokens=2000, base_tokens=0, agents=agents,
                request_agent={"l0": "L", "r0": "R", "s1": "S"}, request_task={"l0": 0, "r0": 0, "s1": 1},
                request_tokens={"l0": 1000, "r0": 1000, "s1": 1000},
                task_agents={0: frozenset("LR"), 1: frozenset("S")}, chain=lambda t, elig: chains[t],
                swap_s_per_token=1e-5, max_actions=64)
    plan = greedy_pack(p, frozenset("LRS"))
    assert plan.admit == ["l0", "r0"] and (6.0, "s1") in plan.blocked  # admitted together
    split = score_state(p, frozenset("LRS"), ["s1", "l0"], {"s1": 6.0, "l0": 1.0}, 2000)  # by each call's own gain
    assert plan.score > split.total  # and the state is worth more
