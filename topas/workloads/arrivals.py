"""Seeded random streams and Poisson task arrivals.

Everything a workload samples is a deterministic function of (workload config, seed) and
never of the scheduler, so every scheduler replays the identical trace. Arrivals and task
contents use two independent streams derived from (seed, workload name): changing the
arrival rate rescales the same arrival pattern and leaves every task's DAG and lengths
unchanged, and the first k tasks do not depend on `num_tasks`.
"""

from __future__ import annotations

import zlib

import numpy as np


def streams(seed: int, workload: str) -> tuple[np.random.Generator, np.random.Generator]:
    """(arrival stream, task-content stream) for a workload name and a seed."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    ss = np.random.SeedSequence([int(seed), zlib.crc32(workload.encode("utf-8"))])
    a, t = ss.spawn(2)
    return np.random.default_rng(a), np.random.default_rng(t)


def poisson_arrivals(rate: float, n: int, rng: np.random.Generator) -> list[float]:
    """Arrival times (seconds) of `n` tasks of a Poisson process of `rate` tasks/s.

    The first task arrives at t = 0 (the process is shifted to start with an arrival);
    inter-arrival gaps are i.i.d. exponential with mean 1 / rate. Unit-mean gaps are drawn
    first and then scaled, so the same seed at another rate gives the same pattern, rescaled.
    """
    if not rate > 0:
        raise ValueError(f"arrival_rate must be positive, got {rate}")
    if n <= 0:
        raise ValueError(f"num_tasks must be positive, got {n}")
    unit = rng.exponential(1.0, size=n)
    unit[0] = 0.0
    return [float(x) for x in np.cumsum(unit) / rate]
