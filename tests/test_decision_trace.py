"""topas.decision_trace: the wrapped policy decides as it would alone; every decision gives one row per agent."""

from helpers.small_runs import BASE

from topas.decision_trace import passed_calls, per_agent, trace
from topas.runner import run
from topas.sweep import compose_config

RUN = [*BASE, "workload=dag4", "workload.num_tasks=6", "scheduler=topas", "seed=3"]


def test_a_traced_run_is_the_run_itself_and_lists_every_agent_at_every_decision(tmp_path):
    rows, traced, passed = trace(RUN)
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
