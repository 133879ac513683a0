"""The structures of the workflow-shape family (docs/workloads.md, "The shape family").

Each structure is one function of a random stream that returns the stages of a shape: every stage
is one LLM call per task, with its agent, its dependencies and its history (the prompt segments
between the agent prefix and the fresh input, in order). History only names upstream calls, so
every shape is a valid call DAG (`topas.workflow.validate_workflow` checks it when a task is built).

    chain        1-8 calls in sequence; distinct agents or a few agents taking turns; each call sees
                 its predecessor's output, or the whole transcript so far (a growing shared history)
    fanout       [split] -> W parallel calls (W 2-32, one agent or W distinct agents) -> [reduce];
                 the reducer reads every branch's output (a join)
    pipeline     2-4 stages, each one call or a fan-out of one agent (width 2-8); every call of a stage
                 reads all outputs of the stage before (a join at every level)
    review_loop  [plan] -> write -> review -> write -> ... unrolled for 1-4 rounds, then a final write;
                 writer and reviewer keep their conversations (a growing history)
    star         a manager dispatches 2-5 workers one after another (each 1-3 ReAct turns), taking a
                 turn between workers; the manager's conversation carries every report (MetaGPT-TL-like)
    group_chat   2-5 agents speak in a fixed order for 4-12 turns; every turn reads the transcript so far
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

History = tuple[tuple[str, str], ...]  # ("in" | "out", stage id) segments, in prompt order


@dataclass(frozen=True)
class StageSpec:
    """One call of every task of a shape."""

    id: str
    agent: str
    deps: tuple[str, ...] = ()
    history: History = ()


@dataclass
class Layout:
    """A structure's stages and the features that describe it (what the family's tests count)."""

    stages: list[StageSpec] = field(default_factory=list)
    features: dict[str, Any] = field(default_factory=dict)

    def add(self, sid: str, agent: str, deps: tuple[str, ...] = (), history: History = ()) -> str:
        self.stages.append(StageSpec(sid, agent, deps, history))
        return sid


def _out(*sids: str) -> History:
    return tuple(("out", s) for s in sids)


def _turn(sid: str) -> History:
    """A finished turn as it stays in its agent's conversation: its fresh input, then its output."""
    return (("in", sid), ("out", sid))


def _width(rng: np.random.Generator, lo: int, hi: int) -> int:
    """A fan-out width, log-uniform on [lo, hi]: narrow and wide fan-outs equally often per octave."""
    return int(min(hi, max(lo, round(2 ** rng.uniform(np.log2(lo), np.log2(hi))))))


def chain(rng: np.random.Generator) -> Layout:
    n = int(rng.integers(1, 9))
    distinct = n == 1 or rng.random() < 0.6
    k = n if distinct else int(rng.integers(1, n))  # fewer agents than calls: agents take turns
    shared = n > 1 and rng.random() < 0.5
    lay = Layout(features={"calls": n, "agents": k, "history": "shared" if shared else "direct"})
    prev: list[str] = []
    for i in range(n):
        deps = (prev[-1],) if prev else ()
        hist = _out(*prev) if shared else _out(*deps)
        prev.append(lay.add(f"c{i + 1}", f"C{i % k + 1}", deps, hist))
    return lay


def fanout(rng: np.random.Generator) -> Layout:
    w = _width(rng, 2, 32)
    one_agent = rng.random() < 0.5
    split, join = rng.random() < 0.85, rng.random() < 0.75
    lay = Layout(features={"width": w, "branch_agents": "one" if one_agent else "distinct", "split": split, "join": join})
    src = (lay.add("split", "Splitter"),) if split else ()
    branches = [lay.add(f"m{i + 1:02d}", "Mapper" if one_agent else f"Mapper{i + 1:02d}", src, _out(*src))
                for i in range(w)]
    if join:
        lay.add("reduce", "Reducer", tuple(branches), _out(*branches))
    return lay


def pipeline(rng: np.random.Generator) -> Layout:
    n = int(rng.integers(2, 5))
    widths = [1 if rng.random() < 0.5 else _width(rng, 2, 8) for _ in range(n)]
    lay = Layout(features={"stages": n, "widths": widths})
    prev: tuple[str, ...] = ()
    for i, w in enumerate(widths):
        ids = [f"p{i + 1}" if w == 1 else f"p{i + 1}_{j + 1}" for j in range(w)]
        prev = tuple(lay.add(sid, f"Stage{i + 1}", prev, _out(*prev)) for sid in ids)
    return lay


def review_loop(rng: np.random.Generator) -> Layout:
    rounds = int(rng.integers(1, 5))
    plan = rng.random() < 0.5
    lay = Layout(features={"rounds": rounds, "plan": plan})
    last = lay.add("plan", "Planner") if plan else None
    writer: History = _out(last) if last else ()  # the writer's conversation so far
    reviewer: History = ()
    for r in range(1, rounds + 2):
        w = lay.add(f"w{r}", "Writer", (last,) if last else (), writer)
        writer += _turn(w)
        if r == rounds + 1:
            break
        last = lay.add(f"r{r}", "Reviewer", (w,), reviewer + _out(w))
        reviewer += _out(w) + _turn(last)
        writer += _out(last)
    return lay


def star(rng: np.random.Generator) -> Layout:
    k = int(rng.integers(2, 6))
    turns = [int(rng.integers(1, 4)) for _ in range(k)]
    lay = Layout(features={"workers": k, "turns": turns})
    last = lay.add("mgr1", "Manager")
    manager: History = _turn(last)
    for i, t in enumerate(turns):
        worker: History = _out(last)  # the manager's instruction opens the worker's conversation
        for j in range(t):
            last = lay.add(f"w{i + 1}t{j + 1}", f"Worker{i + 1}", (last,), worker)
            worker += _turn(last)
        last = lay.add(f"mgr{i + 2}", "Manager", (last,), manager + _out(last))
        manager += _out(lay.stages[-2].id) + _turn(last)
    return lay


def group_chat(rng: np.random.Generator) -> Layout:
    n = int(rng.integers(2, 6))
    turns = int(rng.integers(max(4, n), 13))
    order = [int(x) for x in rng.permutation(n)]  # the speaking order, fixed per shape
    lay = Layout(features={"agents": n, "turns": turns})
    said: list[str] = []
    for t in range(turns):
        deps = (said[-1],) if said else ()
        said.append(lay.add(f"t{t + 1:02d}", f"Speaker{order[t % n] + 1}", deps, _out(*said)))
    return lay


STRUCTURES: dict[str, Callable[[np.random.Generator], Layout]] = {
    "chain": chain,
    "fanout": fanout,
    "pipeline": pipeline,
    "review_loop": review_loop,
    "star": star,
    "group_chat": group_chat,
}
