"""Continuum-TTL: keep a finished call's KV pinned for a time-to-live, program-level FCFS.

Source: Continuum (Li et al., 2025, arXiv 2511.02230, "Efficient and Robust Multi-Turn
LLM Agent Scheduling with KV Cache Time-to-Live"), section 4-5:
- when a call of a program ends and the program will come back (a tool call in
  between), its KV is pinned for a TTL
      tau* = argmax_tau  P(tau) * (T * eta + Reload) - tau                    (Eq. 2)
  P(tau): empirical CDF of the pause before the program's next call (per tool; the
  global pool when a tool has fewer than `min_samples` = 100 observations; with fewer
  than that overall, an Exp(1 s) pause and eta = 1); T: sliding-window mean queueing
  delay (what an evicted program pays to re-enter the queue); eta: memoryfulness in
  [-1, 1] (how much the next call depends on the retained context); Reload: time to get
  the KV back (prefill, or host->GPU transfer with a CPU tier). The memory-share factor
  of the benefit and of the holding cost is the same and cancels;
- scheduling: preempted requests first, then requests of programs inside their TTL,
  then by program arrival (program-level FCFS); deadlock guard: when pinned KV would
  exhaust memory, unpin the latest programs first.

Mapping onto our API: a task is a program; its "tool" is the agent whose call just
finished: the pause is the time from that call's finish to the next call of the same
agent in the same task becoming ready (learned online from events, per agent, then
across agents). A pin is taken only if the template says the task still has calls of
that agent to run. A pin is released when its TTL has passed, or once the call it
waited for has been admitted. `pin` holds the agent prefixes of all live (task, agent)
TTLs, within `max_pin_fraction` of the KV pool (the deadlock guard, dropping the latest
tasks' pins first); harness guards shared with kvflow (`safe_pins`): a pin never takes
KV the running requests may still need (estimated), and with nothing running only the
queue head's own prefix may stay pinned. Reload = host transfer of the prefix when the
engine has a host tier (evicted KV goes there), else its prefill.

Deviations: our `Decision` pins agent prefixes, not task-level segments, so the task's
own history below the prefix is not protected (it stays cached only as long as LRU
keeps it) and a pinned prefix also serves the agent's calls of other tasks; TTLs expire
at the first decision point after their deadline (no timer events); eta is a parameter
(Continuum derives it from per-workload correlation statistics).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from baselines.kvflow import safe_pins
from topas.policy import Decision, Policy, RequestFinished, RequestReady, SchedulerView, check_ranges, register_policy
from topas.policy.estimates import PRIOR_OUTPUT_TOKENS, Prior, ServiceEstimator
from topas.policy.events import Event
from topas.policy.progress import active_stage_counts, remaining_calls


def ttl_from_samples(samples: list[float], benefit_s: float) -> float:
    """argmax over tau of P(tau) * benefit - tau for the empirical CDF of `samples` (0 if never positive)."""
    xs = sorted(samples)
    best_tau, best = 0.0, 0.0
    n = len(xs)
    for i, x in enumerate(xs):
        if i + 1 < n and xs[i + 1] == x:
            continue  # P jumps at the last copy of a value
        v = (i + 1) / n * benefit_s - x
        if v > best:
            best_tau, best = x, v
    return best_tau


def ttl_exponential(mean_s: float, benefit_s: float) -> float:
    """argmax of (1 - exp(-tau/m)) * B - tau: m ln(B/m) if B > m else 0."""
    return mean_s * math.log(benefit_s / mean_s) if benefit_s > mean_s else 0.0


@dataclass
class _Pin:
    agent: str
    task_arrival: float
    expiry: float
    waiting_rid: str | None = None  # the call it waited for, once ready


@register_policy("continuum_ttl")
class ContinuumTTL(Policy):
    @dataclass(frozen=True)
    class Params:
        eta: float = 1.0  # memoryfulness (Continuum's cold-start value)
        min_samples: int = 100  # per-tool CDF needs this many pauses, else global, else Exp prior
        prior_pause_s: float = 1.0  # Exp(1) cold-start pause
        queue_window: int = 100  # calls in the sliding-window mean queueing delay T (our choice)
        sample_window: int = 1000  # pauses kept per agent (our choice)
        max_pin_fraction: float = 0.5  # deadlock guard: pinned prefix tokens <= this fraction of the pool
        prior_output_tokens: float = PRIOR_OUTPUT_TOKENS  # KV-headroom estimate for new pins only
        stop_at_first_misfit: bool = True  # vLLM (Continuum's base) admission stops at the first misfit

        def __post_init__(self) -> None:
            check_ranges(self, eta="in [-1, 1]", prior_pause_s="> 0", max_pin_fraction="in [0, 1]", min_samples=">= 1",
                         queue_window=">= 1", sample_window=">= 1", prior_output_tokens="> 0")

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        p = self.params
        self.pauses: dict[str, deque] = {}
        self.all_pauses: deque = deque(maxlen=p.sample_window)
        self.queue_delays: deque = deque(maxlen=p.queue_window)
        self.last_finish: dict[tuple[int, str], float] = {}
        self.pending: list[tuple[int, str, float, float]] = []  # (task, agent, task arrival, finish) to decide
        self.pins: dict[tuple[int, str], _Pin] = {}
        self.est = ServiceEstimator(Prior(p.prior_output_tokens))

    # ------------------------------------------------------------------ learning
    def on_event(self, event: Event) -> None:
        self.est.on_event(event)
        if isinstance(event, RequestFinished):
            r = event.request
            if r.admitted_time is not None:
                self.queue_delays.append(max(r.admitted_time - r.ready_time, 0.0))
            key = (r.task_id, r.agent)
            self.last_finish[key] = event.time
            if event.task_done:
                for k in [k for k in self.last_finish if k[0] == r.task_id]:
                    del self.last_finish[k]
                for k in [k for k in self.pins if k[0] == r.task_id]:
                    del self.pins[k]
                self.pending = [x for x in self.pending if x[0] != r.task_id]
            else:
                self.pending.append((r.task_id, r.agent, r.task_arrival, event.time))
        elif isinstance(event, RequestReady):
            r = event.request
            key = (r.task_id, r.agent)
            if key in self.last_finish:
                gap = max(event.time - self.last_finish.pop(key), 0.0)
                self.pauses.setdefault(r.agent, deque(maxlen=self.params.sample_window)).append(gap)
                self.all_pauses.append(gap)
            pin = self.pins.get(key)
            if pin is not None and event.time < pin.expiry and pin.waiting_rid is None:
                pin.waiting_rid = r.rid

    def queueing_delay(self) -> float:
        return sum(self.queue_delays) / len(self.queue_delays) if self.queue_delays else 0.0

    def ttl(self, view: SchedulerView, agent: str) -> float:
        p = self.params
        ps = view.prefixes.get(agent)
        tokens = ps.tokens if ps is not None else 0
        reload = view.costs.swap_time(tokens) if view.host_capacity_tokens > 0 else view.costs.prefill_time(tokens)
        own = self.pauses.get(agent, ())
        if len(own) >= p.min_samples:
            return ttl_from_samples(list(own), self.queueing_delay() * p.eta + reload)
        if len(self.all_pauses) >= p.min_samples:
            return ttl_from_samples(list(self.all_pauses), self.queueing_delay() * p.eta + reload)
        return ttl_exponential(p.prior_pause_s, self.queueing_delay() * 1.0 + reload)

    # ------------------------------------------------------------------ pins
    def _will_return(self, view: SchedulerView, task_id: int, agent: str) -> bool:
        prog = view.tasks.get(task_id)
        tpl = view.templates.get(prog.template) if prog is not None else None
        if tpl is None:
            return False
        rem = remaining_calls(tpl, prog, active_stage_counts(view).get(task_id, {}))
        return any(n > 0 and tpl.stages[s].agent == agent for s, n in rem.items())

    def _update_pins(self, view: SchedulerView) -> frozenset[str]:
        now = view.now
        for task_id, agent, arrival, finish in self.pending:
            if self._will_return(view, task_id, agent):
                tau = self.ttl(view, agent)
                if tau > 0 and finish + tau > now:
                    pin = _Pin(agent, arrival, finish + tau)
                    for r in view.waiting:  # the next call may already be ready (no tool gap)
                        if r.task_id == task_id and r.agent == agent and finish <= r.ready_time < pin.expiry:
                            pin.waiting_rid = r.rid
                            break
                    self.pins[(task_id, agent)] = pin
        self.pending.clear()
        waiting = {r.rid for r in view.waiting}
        for key in list(self.pins):
            pin = self.pins[key]
            if key[0] not in view.tasks:
                del self.pins[key]
            elif pin.waiting_rid is not None:
                if pin.waiting_rid not in waiting:  # admitted: the request holds its KV now
                    del self.pins[key]
            elif now >= pin.expiry:
                del self.pins[key]
        # deadlock guard: the earliest programs' pins first, within the budget and the KV headroom
        order = sorted(self.pins.values(), key=lambda x: (x.task_arrival, x.expiry, x.agent))
        wanted = list(dict.fromkeys(pin.agent for pin in order))
        kept = safe_pins(view, wanted, self.est, self.params.max_pin_fraction)
        for key in [k for k, pin in self.pins.items() if pin.agent not in kept]:
            del self.pins[key]
        return kept

    # ------------------------------------------------------------------ decision
    def schedule(self, view: SchedulerView) -> Decision:
        pinned = self._update_pins(view)
        in_ttl = {pin.waiting_rid for pin in self.pins.values() if pin.waiting_rid is not None}
        order = sorted(view.waiting, key=lambda r: (r.preemptions == 0, r.rid not in in_ttl, r.task_arrival,
                                                    r.task_id, r.ready_time, r.rid))
        return Decision(admit=tuple(r.rid for r in order), pin=pinned,
                        stop_at_first_misfit=self.params.stop_at_first_misfit)
