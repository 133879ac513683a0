"""TOPAS task progress model: expected longest remaining path of a task and the
conditional progress of admitting one of its requests (docs/topas.md).

Reading of the admission gain (docs/topas.md: the paper leaves it open; we implement
reading (a)): a ready call that is not admitted first waits an expected queueing delay
W before its service starts; an admitted one does not. So

    L_i(H) = E[longest path through task i's unfinished stages | admitted set H]
    Delta_task(r | H) = L_i(H) - L_i(H + {r})

removes W from every path through r's stage. Stage service times Z_s come from
per-(agent, stage) service statistics learned online (mean m_s, spread sigma_s); a
stage's own time is (calls still to start) x m_s + (running calls' estimated residual)
+ its waiting penalty. The expectation of the max over paths is approximated by a
smooth maximum, log-sum-exp with temperature tau (the spread of the path lengths):
E[max] of noisy path lengths exceeds the max of their means, and the LSE keeps that
property. It also resolves ties: with two equal parallel branches admitting one branch
gains tau*(log 2 - log(1 + exp(-W/tau))) > 0, the second the rest of W, so progress
is preferred over idling even for deterministic workloads (docs/policy_contract.md).
Computed in reverse topological order, O(stages) per evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from topas.workflow import WorkflowTemplate


def lse(xs: Iterable[float], tau: float) -> float:
    """Smooth maximum tau * log(sum(exp(x / tau))); 0 for no terms (a sink)."""
    xs = list(xs)
    if not xs:
        return 0.0
    m = max(xs)
    if len(xs) == 1 or tau <= 0:
        return m
    return m + tau * math.log(sum(math.exp((x - m) / tau) for x in xs))


@dataclass(frozen=True)
class TaskState:
    """Everything the path model needs about one task at a decision point (hashable: a cache key)."""

    base_items: tuple[tuple[str, float], ...]  # per stage: expected seconds of service still to come
    waiting_items: tuple[tuple[str, int], ...]  # per stage: ready calls not yet admitted
    wait_s: float  # W: expected queueing delay of a ready call left waiting
    tau: float  # smooth-max temperature (seconds)
    base: Mapping[str, float] = field(init=False, compare=False, hash=False, repr=False)
    waiting: Mapping[str, int] = field(init=False, compare=False, hash=False, repr=False)
    _hash: int = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        d = self.__dict__  # derived fields, set past the frozen __setattr__
        d["base"] = dict(self.base_items)
        d["waiting"] = dict(self.waiting_items)
        # the dataclass hash of the compared fields, computed once: states key the policy's caches
        d["_hash"] = hash((self.base_items, self.waiting_items, self.wait_s, self.tau))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:  # the dataclass's comparison, after the cached hashes (cache lookups)
        if self is other:
            return True
        if other.__class__ is not TaskState:
            return NotImplemented
        return (self._hash == other._hash and self.base_items == other.base_items
                and self.waiting_items == other.waiting_items and self.wait_s == other.wait_s and self.tau == other.tau)

    @classmethod
    def of(cls, base: Mapping[str, float], waiting: Mapping[str, int], wait_s: float, tau: float) -> TaskState:
        return cls(tuple(sorted(base.items())), tuple(sorted(waiting.items())), wait_s, tau)


class PathModel:
    """Smooth longest remaining path over one template (reused for all its tasks)."""

    def __init__(self, tpl: WorkflowTemplate) -> None:
        self.order = tuple(reversed(tpl.topo_order))
        self.children = {s: tpl.children[s] for s in tpl.stages}
        self.roots = tuple(s for s in tpl.topo_order if not tpl.stages[s].deps)
        self._steps = tuple((s, self.children[s]) for s in self.order)

    def longest(self, st: TaskState, admitted: Mapping[str, int]) -> float:
        """L_i(H): `admitted` counts, per stage, the waiting calls in H."""
        f: dict[str, float] = {}
        base, waiting, wait_s, tau = st.base, st.waiting, st.wait_s, st.tau
        for s, kids in self._steps:
            own = base.get(s, 0.0)
            w = waiting.get(s, 0)
            if w:
                own += wait_s * (w - admitted.get(s, 0)) / w
            # lse of no term is 0.0 and of one term the term itself (the common chain-shaped case)
            if not kids:
                f[s] = own + 0.0
            elif len(kids) == 1:
                f[s] = own + f[kids[0]]
            else:
                f[s] = own + lse([f[c] for c in kids], tau)
        return lse([f[r] for r in self.roots], tau)


def admission_chain(model: PathModel, st: TaskState, eligible: Mapping[str, int]) -> list[tuple[str, float]]:
    """Greedy within one task: repeatedly admit the eligible waiting stage with the largest
    marginal Delta_task; returns [(stage, marginal gain)] in admission order. Sequential
    admissions accumulate (each gain is conditional on the ones before)."""
    left = dict(eligible)
    admitted: dict[str, int] = {}
    cur = model.longest(st, admitted)
    chain: list[tuple[str, float]] = []
    while left:
        best, best_l = None, cur
        for s in sorted(left):
            n = admitted.get(s, 0)
            admitted[s] = n + 1
            ln = model.longest(st, admitted)
            admitted[s] = n
            if best is None or ln < best_l - 1e-12:
                best, best_l = s, ln
        assert best is not None
        chain.append((best, max(cur - best_l, 0.0)))
        admitted[best] = admitted.get(best, 0) + 1
        left[best] -= 1
        if left[best] == 0:
            del left[best]
        cur = best_l
    return chain
