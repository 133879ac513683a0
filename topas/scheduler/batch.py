"""Inputs of J_batch, TOPAS's price for the batch consequence of a resident set (docs/topas.md,
"Consolidation"): how fast calls of each agent become ready (learned online from the ready events
the policy sees; no future arrival is read) and the typical call of the agents held resident."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field


@dataclass
class ReadyRates:
    """Calls per second becoming ready, per agent, over the last `window_s` seconds."""

    window_s: float = 600.0
    _times: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    _start: float | None = None

    def observe(self, agent: str, t: float) -> None:
        if self._start is None:
            self._start = t
        self._times[agent].append(t)

    def rate(self, agent: str, now: float) -> float:
        q = self._times.get(agent)
        if not q or self._start is None:
            return 0.0
        while q and q[0] < now - self.window_s:
            q.popleft()
        span = min(max(now - self._start, 1.0), self.window_s)
        return len(q) / span


@dataclass(frozen=True)
class BatchPricing:
    """The typical call of the agents held resident (KV tokens, expected service seconds), the rate at
    which each agent's calls become ready, and the gain an expected call is valued at."""

    call_tokens: float
    call_s: float
    ready_rate: dict[str, float]
    expected_gain: float
