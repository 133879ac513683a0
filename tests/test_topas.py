"""TOPAS: the score terms, the path model, the search, and the policy on hand-built states."""

import math
import random

import pytest
from conftest import check_run, make_trace, random_agents, random_dag, run_sim
from hypothesis import given, settings
from hypothesis import strategies as st

from topas.policy import builtin_policy_names, create_policy
from topas.scheduler import score
from topas.scheduler.pack import greedy_pack
from topas.scheduler.problem import AgentOption, Candidates, Problem, RunningOption
from topas.scheduler.progress import PathModel, TaskState, admission_chain, lse
from topas.scheduler.search import feasible, search
from topas.workflow import Agent, TemplateStage, WorkflowTemplate


# ---------------------------------------------------------------- score terms (pure functions)
def test_score_terms():
    assert score.aging(10.0, 10.0, 1.0, 60.0) == 1.0
    assert score.aging(70.0, 10.0, 2.0, 60.0) == pytest.approx(1 + 2 * math.log(2))
    assert score.j_admit([(2.0, 1.5), (1.0, 1.0)]) == 4.0
    assert score.j_move([(0.1, 3), (0.2, 0)]) == pytest.approx(0.5)  # per affected task, at least once
    assert score.j_redo([100, 50], 0.02) == pytest.approx(3.0)
    assert score.j_revoke([1.0, 2.5]) == 3.5
    assert score.v_reuse([(2, 0.1), (0, 5.0)], beta=0.5) == pytest.approx(0.1)


def test_the_score_of_a_state_is_one_function_with_every_term_in_its_breakdown():
    """J_admit (age-weighted, with what aging adds), J_move (a prefix moved in, charged per task using it; the
    room the batch takes from prefixes left out), V_reuse, and J_redo + J_revoke + margin of a preemption."""
    agents = [ag("a", 1000, on_gpu=False, move_in=0.5, reuse_n=2, reload_s=0.25), ag("b", 3000, on_gpu=True)]
    waiting = {"r1": ("a", 0, 2000, 6.0), "r2": ("a", 1, 2000, 3.0)}
    p = problem(agents, waiting, kv_pool_tokens=6000, aging={0: 2.0, 1: 1.0})
    slow = RunningOption("v", 9, 500, redo_s=0.4, revoke_s=lambda: 0.6, margin=2.0)
    b = score.score_state(p, frozenset({"a"}), ["r1", "r2"], {"r1": 6.0, "r2": 3.0}, mem=5000, preempt=[slow])
    assert b.j_admit == 9.0 and b.aging == pytest.approx(9.0 - (6.0 / 2.0 + 3.0))  # aging doubled task 0's gain
    overflow = 5000 + 3000 - 6000  # b's prefix, left out of R', gives up what the batch needs beyond the kv_pool_tokens
    assert b.j_move == pytest.approx(0.5 * 2 + overflow * 1e-5)  # a moves in for both of its tasks
    assert b.v_reuse == pytest.approx(2 * 0.25)
    assert (b.j_redo, b.j_revoke, b.margin) == (0.4, 0.6, pytest.approx(2.0 * 1.0))
    assert b.total == pytest.approx(9.0 - b.j_move + 0.5 - 3.0)
    assert score.score_state(problem(agents, waiting, kv_pool_tokens=6000, reuse=False), frozenset({"a"}), [], {}, 1000).v_reuse == 0.0


# ---------------------------------------------------------------- path model
def tpl(stages, agents=None):
    agents = agents or {s.agent for s in stages}
    return WorkflowTemplate("t", {a: Agent(a, 100) for a in agents}, {s.id: s for s in stages})


def test_lse_is_a_smooth_upper_bound_of_max():
    assert lse([], 1.0) == 0.0 and lse([3.0], 1.0) == 3.0
    assert 5.0 < lse([5.0, 5.0], 1.0) == pytest.approx(5.0 + math.log(2))
    assert lse([1.0, 9.0], 0.0) == 9.0


def test_gain_is_largest_on_the_critical_path():
    # source done; a long branch (L: 30 s) and a short one (R: 5 s), both waiting, then a join
    t = tpl([TemplateStage("S", "a"), TemplateStage("L", "b", ("S",)), TemplateStage("R", "c", ("S",)),
             TemplateStage("J", "d", ("L", "R"))])
    st_ = TaskState.of({"L": 30.0, "R": 5.0, "J": 10.0}, {"L": 1, "R": 1}, wait_s=8.0, tau=1.0)
    m = PathModel(t)
    base = m.longest(st_, {})
    d_long = base - m.longest(st_, {"L": 1})
    d_short = base - m.longest(st_, {"R": 1})
    assert d_long == pytest.approx(8.0, rel=0.01) and d_short < 0.01


def test_equal_parallel_branches_still_gain_so_progress_beats_idling():
    t = tpl([TemplateStage("S", "a"), TemplateStage("L", "b", ("S",)), TemplateStage("R", "c", ("S",)),
             TemplateStage("J", "d", ("L", "R"))])
    st_ = TaskState.of({"L": 10.0, "R": 10.0, "J": 10.0}, {"L": 1, "R": 1}, wait_s=4.0, tau=1.0)
    chain = admission_chain(PathModel(t), st_, {"L": 1, "R": 1})
    assert len(chain) == 2 and all(g > 0 for _, g in chain)
    assert sum(g for _, g in chain) == pytest.approx(4.0, rel=0.01)  # both admitted remove W from every path


# ---------------------------------------------------------------- search on hand-built problems
def problem(agents, waiting, kv_pool_tokens, base=0, K=64, chains=None, reuse=True, beta=1.0, running=None, aging=None):
    """waiting: {rid: (agent, task, tokens, gain)}"""
    by_task = {}
    for rid, (a, t, _, g) in waiting.items():
        by_task.setdefault(t, []).append((rid, a, g))

    def chain(t, elig):
        items = [(rid, g) for rid, a, g in by_task[t] if a in elig]
        return sorted(items, key=lambda x: -x[1])

    return Problem(kv_pool_tokens=kv_pool_tokens, base_tokens=base, agents={a.name: a for a in agents},
                   request_agent={r: v[0] for r, v in waiting.items()}, request_task={r: v[1] for r, v in waiting.items()},
                   request_tokens={r: v[2] for r, v in waiting.items()},
                   task_agents={t: frozenset(a for _, a, _ in rs) for t, rs in by_task.items()},
                   chain=chains or chain, swap_s_per_token=1e-5, max_actions=K, beta=beta if reuse else 0.0,
                   task_aging=aging or {}, running=(lambda: running) if running is not None else None)


def ag(name, tokens=1000, forced=False, on_gpu=True, move_in=0.0, reuse_n=0, reload_s=0.1):
    return AgentOption(name, tokens, forced, on_gpu, move_in, reuse_n, reload_s)


def test_refuses_a_move_whose_cost_exceeds_its_gain():
    p = problem([ag("x", on_gpu=False, move_in=5.0)], {"r": ("x", 0, 100, 1.0)}, kv_pool_tokens=10_000)
    assert search(p, 6).admit == []
    p = problem([ag("x", on_gpu=False, move_in=0.5)], {"r": ("x", 0, 100, 1.0)}, kv_pool_tokens=10_000)
    assert search(p, 6).admit == ["r"]


def test_keeps_the_prefix_whose_agent_has_downstream_stages():
    # room for one 3k prefix besides the forced one; y has a stage about to become ready, z none
    agents = [ag("run", 3000, forced=True), ag("y", 3000, reuse_n=2, reload_s=0.5), ag("z", 3000)]
    plan = search(problem(agents, {}, kv_pool_tokens=7000), 6)
    assert plan.resident == frozenset({"run", "y"})
    plan = search(problem(agents, {}, kv_pool_tokens=7000, reuse=False), 6)
    assert "y" not in plan.resident  # without V_reuse there is no reason to hold it


def test_budget_holds_and_greedy_pack_takes_highest_gain_first():
    agents = [ag("a", 1000), ag("b", 1000)]
    waiting = {"r1": ("a", 0, 3000, 1.0), "r2": ("b", 1, 3000, 5.0), "r3": ("a", 2, 3000, 3.0)}
    plan = greedy_pack(problem(agents, waiting, kv_pool_tokens=8500), frozenset({"a", "b"}))
    assert plan.admit == ["r2", "r3"] and plan.memory <= 8500
    assert plan.blocked == [(1.0, "r1")]


def test_preempts_only_when_gain_exceeds_redo_and_revoke():
    agents = [ag("a", 1000, forced=True), ag("b", 1000)]
    waiting = {"r": ("b", 1, 5000, 10.0)}
    assert search(problem(agents, waiting, kv_pool_tokens=8000, base=5000), 6).admit == []  # no preemption allowed
    cheap = search(problem(agents, waiting, kv_pool_tokens=8000, base=5000, running=[RunningOption("old", 0, 5000, 1.0, 1.0)]), 6)
    assert cheap.admit == ["r"] and cheap.preempt_rids == ["old"]
    assert cheap.breakdown.j_redo == 1.0 and cheap.breakdown.j_revoke == 1.0  # the repaired state's own score
    dear = search(problem(agents, waiting, kv_pool_tokens=8000, base=5000, running=[RunningOption("old", 0, 5000, 10.0, 10.0)]), 6)
    assert dear.admit == [] and dear.preempt == []
    # the margin is hysteresis: a gain of 10 pays for redo + revoke of 4, but not for 3 x 4
    held = search(problem(agents, waiting, kv_pool_tokens=8000, base=5000, running=[RunningOption("old", 0, 5000, 2.0, 2.0, margin=2.0)]), 6)
    assert held.admit == []


def _small_pool(seed):
    rng = random.Random(seed)
    agents = [ag(f"a{i}", rng.randint(500, 4000), forced=(i == 0 and rng.random() < 0.5), on_gpu=rng.random() < 0.5,
                 move_in=rng.uniform(0, 3), reuse_n=rng.randint(0, 2), reload_s=rng.uniform(0, 1)) for i in range(3)]
    waiting = {f"r{j}": (f"a{rng.randrange(3)}", j, rng.randint(100, 4000), rng.uniform(0, 5)) for j in range(5)}
    return problem(agents, waiting, kv_pool_tokens=rng.randint(3000, 15000))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_enumeration_is_optimal_local_search_is_a_local_optimum_and_both_respect_the_budget(seed):
    p = _small_pool(seed)
    agents = list(p.agents.values())
    exact, local = search(p, max_enumerate=10), search(p, max_enumerate=0)
    for plan in (exact, local):
        forced_only = plan.resident == frozenset(a.name for a in agents if a.forced)
        assert plan.memory <= p.kv_pool_tokens or (forced_only and not plan.admit)
    # enumeration is optimal; the local search (used beyond M agents) may stop at a local optimum,
    # but no single add, drop or swap improves on where it stops
    assert exact.score >= local.score - 1e-9
    free = {a.name for a in agents if not a.forced}
    inside, outside = local.resident & free, free - local.resident
    neighbours = [local.resident | {a} for a in outside] + [local.resident - {a} for a in inside]
    neighbours += [(local.resident - {a}) | {b} for a in inside for b in outside]
    for r in neighbours:
        if feasible(p, r):
            assert greedy_pack(p, r).score <= local.score + 1e-9


def test_local_search_finds_the_enumerated_optimum_on_almost_every_small_pool():
    """Measured: 2 misses in 3,000 pools of 3 agents (seed 11106 is one: from {a0}, reaching
    {a1, a2} takes a drop and two adds at once). The policy enumerates pools of up to M = 6
    free agents, so it is exact there; the local search serves larger pools."""
    misses = [s for s in range(400) if search(_small_pool(s), 0).score < search(_small_pool(s), 10).score - 1e-9]
    assert len(misses) <= 2, misses


# ---------------------------------------------------------------- the policy
def _aging_view(now: float):
    """Room for one call. The old task (id 1, arrived at 0) has two equal parallel calls waiting:
    admitting one of them removes little from its longest path. The new task (id 0, arrived now)
    has one call on its only path: admitting it removes the whole expected wait W."""
    from conftest import make_view, req_info

    from topas.policy import PrefixState, TaskProgress

    templates = {"pair": tpl([TemplateStage("L", "a"), TemplateStage("R", "a")]),
                 "one": tpl([TemplateStage("x", "a")])}
    templates = {k: WorkflowTemplate(k, t.agents, t.stages) for k, t in templates.items()}
    old = [req_info(f"1:{s}", "a", 1, stage=s, arrival=0.0, ready=0.0) for s in ("L", "R")]
    new = req_info("0:x", "a", 0, stage="x", arrival=now, ready=now)
    tasks = {1: TaskProgress(1, "pair", 0.0, waiting=("1:L", "1:R")), 0: TaskProgress(0, "one", now, waiting=("0:x",))}
    prefixes = {"a": PrefixState("a", 500, 500, 0, pinned=False, in_use=False)}
    # prefix 500 + one call's KV (500 own prompt + 256 prior output) fits; a second call does not
    return make_view([new, *old], tasks=tasks, templates=templates, prefixes=prefixes, now=now, kv=1800)


def test_aging_admits_an_old_task_over_a_new_one_with_a_larger_gain():
    """The new task's call gains more (W against a fraction of W), so it goes first while the old
    task is young; once the old task has waited long enough its aging weight g = 1 + rho
    log(1 + age/H_age) overtakes the ratio, and without aging it never does."""
    young, old = _aging_view(1.0), _aging_view(1000.0)
    assert create_policy("topas").schedule(young).admit[0] == "0:x"
    assert create_policy("topas").schedule(old).admit[0] in {"1:L", "1:R"}
    assert create_policy("topas", {"use_aging": False}).schedule(old).admit[0] == "0:x"
    assert create_policy("topas_no_aging").schedule(old).admit[0] == "0:x"


def test_topas_never_exceeds_the_budget_and_finishes_everything_in_the_simulator():
    rng = random.Random(3)
    agents = random_agents(rng, 4)
    shapes = [random_dag(rng, rng.randint(2, 6), agents, f"w{i}") for i in range(3)]
    wfs = [shapes[i % 3] for i in range(30)]
    tr = make_trace(wfs, sorted(rng.uniform(0, 30) for _ in wfs))
    for pol in [n for n in builtin_policy_names() if n.startswith("topas")]:  # TOPAS and its ablations
        check_run(run_sim(tr, pol, kv_pool_tokens=6000))


def test_decisions_do_not_depend_on_true_output_lengths():
    """Two traces identical but for the true output lengths: every decision before the first
    call finishes must be identical (the policy cannot see what has not happened)."""
    from conftest import chain_workflow

    class Recorder:
        def __init__(self, inner):
            self.inner, self.log, self.finished = inner, [], False
            self.name = inner.name

        def on_event(self, e):
            from topas.policy import RequestFinished
            self.finished |= isinstance(e, RequestFinished)
            self.inner.on_event(e)

        def schedule(self, view):
            d = self.inner.schedule(view)
            if not self.finished:
                self.log.append((round(view.now, 9), d))
            return d

    def trace(out):
        return make_trace([chain_workflow(out=out) for _ in range(6)], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])

    logs = []
    for out in (50, 400):
        rec = Recorder(create_policy("topas"))
        run_sim(trace(out), rec)
        logs.append(rec.log)
    assert logs[0] and logs[0] == logs[1][: len(logs[0])]


def test_preemption_candidates_come_in_order_key_order_each_built_once_on_first_access():
    keys = [0.5, 0.1, 0.5, 0.2]
    built = []

    def make(i):
        built.append(i)
        return RunningOption(f"r{i}", i, 10, 1.0, 0.0, order_key=keys[i])

    pool = Candidates(keys, make)
    assert pool[0].rid == "r1" and built == [1]  # only what is read is built
    assert [o.rid for o in pool] == ["r1", "r3", "r0", "r2"]  # equal keys keep the given order
    assert sorted(built) == [0, 1, 2, 3]  # each once
