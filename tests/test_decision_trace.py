"""topas.decision_trace: the wrapped policy decides as it would alone; every decision gives one row per agent."""

from helpers.small_runs import BASE

from topas.decision_trace import per_agent, trace
from topas.runner import run
from topas.sweep import compose_config

RUN = [*BASE, "workload=dag4", "workload.num_tasks=6", "scheduler=topas", "seed=3"]


def test_a_traced_run_is_the_run_itself_and_lists_every_agent_at_every_decision(tmp_path):
    rows, traced = trace(RUN)
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
