"""topas.decision_trace: the wrapped policy decides as it would alone; every decision gives one row per agent."""

import pytest
from helpers.small_runs import BASE

from topas.decision_trace import opened_agents, passed_calls, per_agent, trace
from topas.runner import run
from topas.sweep import compose_config

RUN = [*BASE, "workload=dag4", "workload.num_tasks=6", "scheduler=topas", "seed=3"]


def test_a_traced_run_is_the_run_itself_and_lists_every_agent_at_every_decision(tmp_path):
    rows, traced, passed, opened = trace(RUN)
    _, plain = run(compose_config(RUN), out_dir=tmp_path, quiet=True)
    agents = set(rows["agent"])
    assert len(agents) > 1 and rows.groupby("decision")["agent"].nunique().eq(len(agents)).all()
    assert rows["decision"].max() + 1 == rows["decision"].nunique()
    # a prefix with running calls is on the device or being loaded; the summary's shares are shares
    s = per_agent(rows)
    assert ((s.filter(like="share") >= 0) & (s.filter(like="share") <= 1)).all().all()
    assert (s["share idle on device"] <= s["share on device"]).all()
    assert (s["share idle, other agents' calls waiting"] <= s["share idle on device"]).all()
    # tracing changes nothing: the traced run is the run itself
    assert traced["jct_mean"] == plain["jct_mean"] and traced["makespan_s"] == plain["makespan_s"]
    assert set(passed.columns) == {"decision", "rid", "agent", "listed", "prefix on device"}
    assert len(opened) > 0 and opened["decision"].is_unique and opened["decision"].max() < rows["decision"].nunique()


def test_passed_calls_are_started_tasks_calls_left_waiting_when_a_new_task_starts():
    q = [  # 0: task 1 (new) is admitted while started task 0 waits with two calls, one listed ahead of it
        {"waiting": {"0:b": (0, "B", 0), "0:c": (0, "C", None), "1:a": (1, "A", 1)}, "started": {0}, "on_device": {"A", "B"}},
        # 1: only task 0's call is admitted (no task starts)
        {"waiting": {"0:b": (0, "B", 0), "0:c": (0, "C", 1), "2:a": (2, "A", None)}, "started": {0, 1}, "on_device": {"A"}},
        # 2: task 2 starts; task 0's last call, listed behind it, waits
        {"waiting": {"2:a": (2, "A", 0), "0:c": (0, "C", 1)}, "started": {0, 1}, "on_device": {"A", "C"}},
        # 3: task 0's call and task 3's first call are admitted together: nothing is passed
        {"waiting": {"0:c": (0, "C", 1), "3:a": (3, "A", 0)}, "started": {0, 1, 2}, "on_device": {"A", "C"}},
        {"waiting": {}, "started": {0, 1, 2, 3}, "on_device": {"A"}}]
    p = passed_calls(q)
    assert list(p["decision"]) == [0, 0, 2] and list(p["rid"]) == ["0:b", "0:c", "0:c"]
    assert list(p["listed"]) == ["ahead of the entry", "not listed", "behind the entry"]
    assert list(p["prefix on device"]) == [True, False, True]
    # an entry the decision did not list (the engine admitted it unlisted): a listed waiting call was ahead of it
    unlisted = [{"waiting": {"0:b": (0, "B", 0), "1:a": (1, "A", None)}, "started": {0}, "on_device": set()},
                {"waiting": {"0:b": (0, "B", 0)}, "started": {0, 1}, "on_device": set()}]
    assert list(passed_calls(unlisted)["listed"]) == ["ahead of the entry"]


def test_opened_agents_are_admissions_of_agents_with_no_running_call():
    q = [  # 0: A runs; B's call is admitted while A's second call waits: B opened beside a waiting call of A
        {"waiting": {"0:a": (0, "A", 1), "1:b": (1, "B", 0)}, "running_agents": {"A"}},
        # 1: A's call admitted (A runs: nothing opened)
        {"waiting": {"0:a": (0, "A", 0)}, "running_agents": {"A", "B"}},
        # 2: nothing runs; C's and D's calls admitted: both opened, no running agent's call left
        {"waiting": {"2:c": (2, "C", 0), "3:d": (3, "D", 1)}, "running_agents": set()},
        {"waiting": {}, "running_agents": {"C", "D"}}]
    o = opened_agents(q)
    assert list(o["decision"]) == [0, 2] and list(o["opened"]) == ["B", "C, D"]
    assert list(o["running agents' calls left waiting"]) == [1, 0] and list(o["agents running"]) == [1, 0]


@pytest.mark.parametrize("scheduler", ["phase_batch_nolimit", "fcfs"])
def test_phase_batching_never_opens_an_agent_while_a_running_agents_call_waits(scheduler):
    """The reference's defining rule, read off its decisions; FCFS, blind to agents, does open agents so."""
    run = [*BASE, "workload=metagpt_tl", "workload.num_tasks=12", "workload.load=1.1", "seed=3", f"scheduler={scheduler}"]
    opened = trace(run)[3]
    beside = (opened["running agents' calls left waiting"] > 0).sum()
    assert len(opened) > 0 and (beside == 0) == (scheduler == "phase_batch_nolimit")
