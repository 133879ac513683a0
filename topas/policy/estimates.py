"""Online service estimates shared by policies (docs/policy_contract.md, "What a policy may not know").

Per (agent, stage) statistics of *finished* calls: output tokens and service seconds.
Estimates start from a workload-independent prior (one fixed output length for
every call, weighted as `prior_weight` pseudo-observations) and are updated from
`RequestFinished` events only, so no policy ever sees a pending call's true length.
Lookups fall back from (agent, stage) to agent to all calls to the prior.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from topas.policy.events import Event, RequestFinished

Key = tuple[str, str]  # (agent, stage)
# The output length every policy assumes for a call before any call has finished: one number for every call of
# every workload (never a workload's own length parameters, which are the truth for fixed-length workloads). Each
# policy's `prior_output_tokens` parameter defaults to it.
PRIOR_OUTPUT_TOKENS = 256.0


@dataclass(frozen=True)
class Prior:
    output_tokens: float = PRIOR_OUTPUT_TOKENS  # the same for every call of every workload
    weight: float = 1.0  # pseudo-observations


@dataclass
class _Stat:
    n: int = 0
    sum_tokens: float = 0.0
    samples: deque = field(default_factory=lambda: deque(maxlen=64))
    service: deque = field(default_factory=lambda: deque(maxlen=64))

    def add(self, tokens: int, service_s: float) -> None:
        self.n += 1
        self.sum_tokens += tokens
        self.samples.append(tokens)
        self.service.append(service_s)


class ServiceEstimator:
    """Running statistics of finished calls, with a workload-independent prior."""

    def __init__(self, prior: Prior | None = None) -> None:
        self.prior = prior or Prior()
        self._by_stage: dict[Key, _Stat] = {}
        self._by_agent: dict[str, _Stat] = {}
        self._all = _Stat()
        self.observed = 0  # finished calls seen (a cheap version number for caches)
        self._moments: dict[Key, tuple[float, float] | None] = {}
        self._means: dict[Key, float] = {}

    def observe(self, agent: str, stage: str, output_tokens: int, service_s: float) -> None:
        self._by_stage.setdefault((agent, stage), _Stat()).add(output_tokens, service_s)
        self._by_agent.setdefault(agent, _Stat()).add(output_tokens, service_s)
        self._all.add(output_tokens, service_s)
        self.observed += 1
        # a memoised estimate changes only if it reads a statistic this call updated: its own (agent,
        # stage) or a fallback (the agent's, all calls'); the others are kept (recomputing them is costly)
        own = self._by_stage
        for memo in (self._moments, self._means):
            for key in [k for k in memo if k == (agent, stage) or not (k in own and own[k].n > 0)]:
                del memo[key]

    def on_event(self, event: Event) -> None:
        if isinstance(event, RequestFinished):
            r = event.request
            self.observe(r.agent, r.stage, event.output_tokens, event.service_s)

    def _stat(self, agent: str, stage: str) -> _Stat | None:
        for s in (self._by_stage.get((agent, stage)), self._by_agent.get(agent), self._all):
            if s is not None and s.n > 0:
                return s
        return None

    def output_tokens(self, agent: str, stage: str) -> float:
        """Posterior-mean output length of a call of this (agent, stage)."""
        key = (agent, stage)
        v = self._means.get(key)
        if v is None:
            s = self._stat(agent, stage)
            p = self.prior
            v = p.output_tokens if s is None else (p.output_tokens * p.weight + s.sum_tokens) / (p.weight + s.n)
            self._means[key] = v
        return v

    def output_samples(self, agent: str, stage: str) -> tuple[float, ...]:
        """Recent observed output lengths (empirical distribution); the prior if none yet."""
        s = self._stat(agent, stage)
        return tuple(s.samples) if s is not None else (self.prior.output_tokens,)

    def observations(self, agent: str, stage: str) -> int:
        s = self._by_stage.get((agent, stage))
        return s.n if s else 0

    def service_moments(self, agent: str, stage: str) -> tuple[float, float] | None:
        """Mean and standard deviation of observed service seconds (admission to finish) of
        recent calls of this (agent, stage) (falling back to the agent, then all calls); None if none."""
        key = (agent, stage)
        if key not in self._moments:
            s = self._stat(agent, stage)
            if s is None or not s.service:
                self._moments[key] = None
            else:
                xs = s.service
                m = sum(xs) / len(xs)
                self._moments[key] = (m, (sum((x - m) ** 2 for x in xs) / len(xs)) ** 0.5)
        return self._moments[key]
