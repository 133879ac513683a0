"""What each agent has waiting, running and on the device at every decision of one run, for any scheduler.

The runs' tables say what a scheduler achieved (JCT, batch, swaps; `python -m analysis.stage_waits`); this says
how its decisions hold the agents' prefixes: per agent, the share of decisions at which it has running calls
(its prefix is then locked on the device), at which its prefix is on the device, at which it is there with no
running call (idle, evictable), and the mean of its waiting and running calls. Records 0047-0048 read it to tell
a prefix kept resident by a stream of admitted calls from an idle one. Last, the calls of started tasks it left
waiting at the decisions after which a new task started (`passed_calls`): where the decision listed each against
the new task's call and whether its prefix was on the device; record 0049 reads it. And the decisions that opened an
agent (admitted a call of an agent with no running call), with how many calls of the running agents they left
waiting (`opened_agents`): the phase-batching reference never opens an agent while such a call waits; record 0053
reads it.

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
from collections.abc import Iterator
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
        self.queues: list[dict] = []  # per decision: waiting calls (task, agent, place listed), started tasks, prefixes on device
        self.decisions = 0

    def on_event(self, event) -> None:
        self.inner.on_event(event)

    def schedule(self, view: SchedulerView) -> Decision:
        decision = self.inner.schedule(view)
        waiting = Counter(r.agent for r in view.waiting)
        running = Counter(r.agent for r in view.running)
        on_device = {a for a, p in view.prefixes.items() if p.device_tokens >= p.tokens}
        for agent in view.prefixes:
            self.rows.append({"decision": self.decisions, "now": view.now, "agent": agent, "waiting": waiting[agent],
                              "running": running[agent], "on_device": agent in on_device, "listed": len(decision.admit)})
        place = {rid: i for i, rid in enumerate(decision.admit)}
        running_tasks = {r.task_id for r in view.running}
        self.queues.append({
            "waiting": {r.rid: (r.task_id, r.agent, place.get(r.rid)) for r in view.waiting},
            "running_agents": set(running),
            "started": {t for t, p in view.tasks.items() if p.stage_done or t in running_tasks},
            "on_device": on_device})
        self.decisions += 1
        return decision


def admissions(queues: list[dict]) -> Iterator[tuple[int, dict, set[str]]]:
    """(decision, its queue record, the rids admitted after it) for every decision but the last: a call leaves the
    queue only by admission, so the calls admitted after decision d are those waiting at d and not at d + 1."""
    for d, (now, nxt) in enumerate(zip(queues, queues[1:])):
        yield d, now, now["waiting"].keys() - nxt["waiting"].keys()


def passed_calls(queues: list[dict]) -> pd.DataFrame:
    """A row per call of a started task left waiting at a decision after which a task's first call was admitted
    (`analysis.stage_waits.entries_passing` counts these starts from the run's tables): where the decision listed it
    against the first such entry call (ahead, behind, or not listed) and whether its agent's prefix was on the
    device (`admissions` tells the calls admitted after each decision)."""
    rows = []
    for d, now, admitted in admissions(queues):
        entries = [now["waiting"][rid][2] for rid in admitted if now["waiting"][rid][0] not in now["started"]]
        if not entries:
            continue
        first = min((p for p in entries if p is not None), default=None)
        for rid, (task, agent, place) in now["waiting"].items():
            if rid in admitted or task not in now["started"]:
                continue
            where = ("not listed" if place is None else  # an entry admitted unlisted: every listed call was ahead
                     "ahead of the entry" if first is None or place < first else "behind the entry")
            rows.append({"decision": d, "rid": rid, "agent": agent, "listed": where,
                         "prefix on device": agent in now["on_device"]})
    return pd.DataFrame(rows, columns=["decision", "rid", "agent", "listed", "prefix on device"])


def trace(overrides: list[str]) -> tuple[pd.DataFrame, dict, pd.DataFrame, pd.DataFrame]:
    """One run with these overrides: a row per (decision, agent), the run's summary, `passed_calls` and
    `opened_agents`."""
    from topas.runner import run
    from topas.sweep import compose_config

    cfg = compose_config(overrides)
    made: list[Tracing] = []

    def wrapped(name, params):
        made.append(Tracing(create_policy(name, params)))
        return made[-1]

    with tempfile.TemporaryDirectory() as out, mock.patch("topas.runner.create_policy", wrapped):
        _, summary = run(cfg, out_dir=out, quiet=True)
    return pd.DataFrame(made[-1].rows), summary, passed_calls(made[-1].queues), opened_agents(made[-1].queues)


def opened_agents(queues: list[dict]) -> pd.DataFrame:
    """A row per decision after which a call of an agent with no running call was admitted (the decision opened
    that agent: its prefix now holds memory beside the running agents'), with the calls of running agents it left
    waiting. The phase-batching reference never opens an agent while a running agent's call waits; record 0053
    counts how often TOPAS does on MetaGPT-TL."""
    rows = []
    for d, now, admitted in admissions(queues):
        running = now["running_agents"]
        opened = sorted({now["waiting"][rid][1] for rid in admitted} - running)
        if not opened:
            continue
        left = sum(1 for rid, (_, agent, _) in now["waiting"].items() if agent in running and rid not in admitted)
        rows.append({"decision": d, "opened": ", ".join(opened), "agents running": len(running),
                     "running agents' calls left waiting": left})
    return pd.DataFrame(rows, columns=["decision", "opened", "agents running", "running agents' calls left waiting"])


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
        rows, summary, passed, opened = trace(args.overrides)
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
    beside = opened[opened["running agents' calls left waiting"] > 0]
    print(f"\ndecisions that opened an agent: {len(opened)}; of them while a running agent's call waited: {len(beside)}"
          f" ({len(beside) / max(len(opened), 1):.1%})")
    starts = passed["decision"].nunique()
    print(f"\ndecisions after which a task started while a started task's call waited: {starts}; such calls: {len(passed)}")
    if len(passed):
        print(passed.groupby(["listed", "prefix on device"]).size().rename("calls").reset_index().to_markdown(index=False))


if __name__ == "__main__":
    main(sys.argv[1:])
