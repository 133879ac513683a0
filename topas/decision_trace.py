"""What each agent has waiting, running and on the device at every decision of one run, for any scheduler.

The runs' tables say what a scheduler achieved (JCT, batch, swaps; `python -m analysis.stage_waits`); this says
how its decisions hold the agents' prefixes: per agent, the share of decisions at which it has running calls
(its prefix is then locked on the device), at which its prefix is on the device, at which it is there with no
running call (idle, evictable), and the mean of its waiting and running calls. Records 0047-0048 read it to tell
a prefix kept resident by a stream of admitted calls from an idle one.

    python -m topas.decision_trace workload=shapes workload.params.shape=e26 workload.load=1.1 \\
        workload.arrival_rate=null workload.num_tasks=60 seed=0 scheduler=topas [--csv trace.csv]

Arguments are Hydra overrides, as for run.py; the run is made in a temporary folder (nothing is written to runs/).
The policy is wrapped, not changed: its decisions, and so the run, are the ones run.py makes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from unittest import mock

import pandas as pd

from topas.errors import one_line
from topas.policy import Decision, Policy, SchedulerView, create_policy


class Tracing(Policy):
    """A policy that records, at each decision of the policy it wraps, every agent's waiting and running calls and
    whether its prefix is on the device."""

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner.params)
        self.inner, self.name, self.oracle = inner, inner.name, inner.oracle
        self.rows: list[dict] = []
        self.decisions = 0

    def on_event(self, event) -> None:
        self.inner.on_event(event)

    def schedule(self, view: SchedulerView) -> Decision:
        decision = self.inner.schedule(view)
        waiting = Counter(r.agent for r in view.waiting)
        running = Counter(r.agent for r in view.running)
        for agent, p in view.prefixes.items():
            self.rows.append({"decision": self.decisions, "now": view.now, "agent": agent, "waiting": waiting[agent],
                              "running": running[agent], "on_device": p.device_tokens >= p.tokens,
                              "listed": len(decision.admit)})
        self.decisions += 1
        return decision


def trace(overrides: list[str]) -> tuple[pd.DataFrame, dict]:
    """One run with these overrides: a row per (decision, agent), and the run's summary."""
    from topas.runner import run
    from topas.sweep import compose_config

    cfg = compose_config(overrides)
    made: list[Tracing] = []

    def wrapped(name, params):
        made.append(Tracing(create_policy(name, params)))
        return made[-1]

    with tempfile.TemporaryDirectory() as out, mock.patch("topas.runner.create_policy", wrapped):
        _, summary = run(cfg, out_dir=out, quiet=True)
    return pd.DataFrame(made[-1].rows), summary


def per_agent(rows: pd.DataFrame) -> pd.DataFrame:
    """Per agent, over the run's decisions: shares with running calls, on the device, idle on the device, and idle
    while other agents' calls wait (its memory could serve them if it moved out); mean calls waiting and running."""
    idle = rows["on_device"] & (rows["running"] == 0)
    others = rows.groupby("decision")["waiting"].transform("sum") - rows["waiting"]  # other agents' waiting calls
    g = rows.assign(idle=idle, needed=idle & (others > 0), busy=rows["running"] > 0).groupby("agent")
    return pd.DataFrame({"decisions": g.size(), "share with running calls": g["busy"].mean(),
                         "share on device": g["on_device"].mean(), "share idle on device": g["idle"].mean(),
                         "share idle, other agents' calls waiting": g["needed"].mean(),
                         "mean waiting": g["waiting"].mean(), "mean running": g["running"].mean()}).round(3)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m topas.decision_trace", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of the run (as for run.py)")
    ap.add_argument("--csv", help="also write the row per (decision, agent) here")
    args = ap.parse_args(argv)
    try:
        rows, summary = trace(args.overrides)
    except Exception as e:  # a bad override or config: Hydra's and the runner's errors, on one line
        sys.exit(f"error: {one_line(e)}")
    if rows.empty:
        sys.exit("error: the run made no decision")
    if args.csv:
        rows.to_csv(args.csv, index=False)
    print(f"mean JCT {summary['jct_mean']:.2f} s, makespan {summary['makespan_s']:.1f} s, mean batch "
          f"{summary['mean_batch_size']:.2f}")
    print(per_agent(rows).to_markdown())
    resident = rows.groupby("decision")["on_device"].sum().value_counts(normalize=True).sort_index()
    print(f"\n{rows['decision'].nunique()} decisions; agent prefixes on the device at once: "
          + ", ".join(f"{int(k)} at {v:.1%}" for k, v in resident.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
