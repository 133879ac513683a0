"""The terms of TOPAS's score of a post-decision state, all in seconds (docs/topas.md):

    Score = J_admit - J_move - J_redo - J_revoke + V_reuse - J_batch

Each term is a pure function so it can be unit-tested and switched off for ablations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def aging(now: float, arrival: float, rho: float, h_age: float) -> float:
    """g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age); multiplies the admission term only."""
    return 1.0 + rho * math.log1p(max(now - arrival, 0.0) / h_age)


def j_admit(gains: Iterable[tuple[float, float]]) -> float:
    """Sum over admitted requests of aging x Delta_task: items are (delta_seconds, aging)."""
    return sum(d * g for d, g in gains)


def j_admit_weighted(weighted_gains: Iterable[float]) -> float:
    """J_admit of gains already multiplied by their aging (the search's gains): the same sum, d x 1.0 being d."""
    return sum(weighted_gains)


def j_move(moves: Iterable[tuple[float, int]]) -> float:
    """Prefix movement: items are (seconds to move one prefix in or out, tasks it affects).
    The transfer delays each affected task once (docs/topas.md: charged once per affected task)."""
    return sum(t * max(n, 1) for t, n in moves)


def j_redo(generated_tokens: Iterable[int], t_decode: float) -> float:
    """Re-decoding the tokens preempted requests had already generated."""
    return t_decode * sum(generated_tokens)


def j_revoke(credits: Iterable[float]) -> float:
    """Admission credit taken back from preempted requests (no progress is earned twice)."""
    return sum(credits)


def v_reuse(resident: Iterable[tuple[int, float]], beta: float) -> float:
    """beta x sum over kept prefixes of (one-hop downstream stages about to become ready) x reload seconds."""
    return beta * sum(n * t for n, t in resident)



def j_batch(pending_gains: Sequence[float], call_tokens: float, free_tokens: float) -> float:
    """The batch consequence of a state (docs/topas.md, "Consolidation"): the calls of the agents it holds
    resident that are pending now or about to become ready (`pending_gains`, their gains) would need
    `call_tokens` each; those the KV left free cannot hold are crowded out, valued at their mean gain.
    Every prefix a state opens takes its tokens from that room, so the cost grows with each one."""
    n = len(pending_gains)
    if not n:
        return 0.0
    crowded = min(float(n), max(n * call_tokens - free_tokens, 0.0) / call_tokens)
    return crowded * sum(pending_gains) / n
