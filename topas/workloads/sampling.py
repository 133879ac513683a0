"""Length distributions built from (min, median, max) measurements.

The calibration data gives per-action min / median / max token counts (docs/workloads.md).
We sample from a *two-piece log-uniform* distribution: with probability 1/2 a value
log-uniform on [min, median], otherwise log-uniform on [median, max]. Its median is exactly
the measured median, its support is exactly the measured range, and it is right-skewed like
token counts. Values are rounded to integers (>= 1). min == max gives a constant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class MinMedMax:
    min: float
    median: float
    max: float

    def __post_init__(self) -> None:
        if not (0 < self.min <= self.median <= self.max):
            raise ValueError(f"need 0 < min <= median <= max, got {self.min}, {self.median}, {self.max}")

    @classmethod
    def of(cls, values: Iterable[float]) -> MinMedMax:
        v = sorted(float(x) for x in values)
        if not v:
            raise ValueError("no values")
        return cls(v[0], float(np.median(v)), v[-1])

    @classmethod
    def from_mapping(cls, m: Mapping[str, float]) -> MinMedMax:
        """From a replay-summary entry {'min', 'median', 'max', ...}."""
        return cls(m["min"], m["median"], m["max"])

    def sample(self, rng: np.random.Generator) -> int:
        """One integer draw from the two-piece log-uniform distribution."""
        u, v = rng.random(), rng.random()
        lo, hi = (self.min, self.median) if u < 0.5 else (self.median, self.max)
        x = math.exp(math.log(lo) + v * (math.log(hi) - math.log(lo)))
        return max(1, int(round(x)))

    def mean(self) -> float:
        """Expected value (before rounding)."""

        def half(a: float, b: float) -> float:
            return a if a == b else (b - a) / math.log(b / a)

        return 0.5 * half(self.min, self.median) + 0.5 * half(self.median, self.max)


def rsp_stat(stats: Mapping[str, float], which: str) -> MinMedMax:
    """MinMedMax from an rsp-cache entry ({'in_min','in_med','in_max','out_min',...}); which = 'in' | 'out'."""
    return MinMedMax(stats[f"{which}_min"], stats[f"{which}_med"], stats[f"{which}_max"])


@dataclass(frozen=True, slots=True)
class Categorical:
    """A discrete distribution given by observed values (each observation equally likely)."""

    values: tuple[int, ...]

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.values[int(rng.integers(len(self.values)))])

    def mean(self) -> float:
        return float(np.mean(self.values))
