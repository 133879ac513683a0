"""Measured latency profile: iteration latency interpolated from a file measured on a real
server (`python -m topas.engines.sglang.tools.profiler`), registered as latency model "profile":

    python run.py backend=sim backend.latency=profile backend.latency_profile=<file>

File format (JSON, `"format": "topas.latency_profile/v1"`; times in seconds, tokens in tokens):

    {
      "format": "topas.latency_profile/v1",
      "meta": {...},                         # free-form: model, device, server settings, method
      "prefill": {                           # one extend iteration of ONE request
        "extend_tokens": [16, 64, ...],      # ascending, > 0   (rows)
        "prefix_tokens": [0, 256, ...],      # ascending, >= 0  (columns: tokens already cached)
        "seconds": [[...], ...]              # rows x columns; null = not measured
      },
      "prefill_batch_shared_s": 0.004,       # optional (0): per-iteration cost a batch of requests pays once
      "decode": {                            # one decode step
        "batch_size": [1, 2, 4, ...],        # ascending, > 0   (rows)
        "context_tokens": [64, 256, ...],    # ascending, > 0   (columns: mean tokens per request)
        "seconds": [[...], ...]
      },
      "overhead_s": {"prefill": 0.0, "decode": 0.0},   # optional: added to every iteration
      "request_latency_s": {"submit": 0.003, "submit_per_token": 1e-6, "return": 0.001,
                            "dispatch": 0.001, "dispatch_per_token": 1e-6},  # optional: the client path
      "samples": [...]                       # optional raw measurements; ignored here
    }

Prediction:
- `decode(b, c)` = D(b, c) + overhead.decode;
- `prefill([(e_i, p_i)])` = max(sum_i P(e_i, p_i) - (n - 1) x batch_shared, max_i P(e_i, p_i))
  + overhead.prefill: the table holds single requests, each of which paid the iteration's
  fixed cost; a batch pays it once (measured: `prefill_batch_shared_s`), and is never
  faster than its largest member.
- `request_latency_s` is not iteration latency: the time from a client's send to the
  scheduler (`submit` + `submit_per_token` x prompt), from the scheduler's answer to the
  client (`return`), and between two calls the client releases at the same moment
  (`dispatch` + `dispatch_per_token` x prompt: it prepares and sends one at a time); the
  simulator applies it as its client path (`topas.engines.sim.config.ClientPath`) unless
  `backend.client_latency` is set.
- D and P: bilinear interpolation on the grid; below the first grid point of an axis the
  edge value (flat), above the last one linear extrapolation with the last segment's
  slope. Cells without a measurement (null: e.g. batch x context beyond the KV pool) are
  filled from a least-squares fit a + b x + c y + d x y of the measured cells. The grid
  is then made non-decreasing along both axes by isotonic regression (pool adjacent
  violators, alternating rows and columns until stable; a noisy spike is averaged with
  its neighbours instead of lifting every later cell, as a running maximum would), and
  the extrapolation slopes are non-negative and non-decreasing along the other axis, so
  every prediction is monotone non-decreasing in each argument.

A malformed file raises `ProfileError` (a ValueError) with a one-line message.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression

from topas.engines.latency.base import ExtendItem, GpuSpec, LatencyModel, ModelSpec

FORMAT = "topas.latency_profile/v1"


class ProfileError(ValueError):
    """A malformed latency profile (one-line message naming the file and the field)."""


def _fill_missing(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray, where: str) -> np.ndarray:
    """Cells that are NaN get the least-squares fit a + b x + c y + d x y of the others."""
    missing = np.isnan(grid)
    if not missing.any():
        return grid
    X, Y = np.meshgrid(xs, ys, indexing="ij")
    have = ~missing
    n = int(have.sum())
    if n == 0:
        raise ProfileError(f"{where}: no measured cell")
    cols = [np.ones(n), X[have], Y[have], X[have] * Y[have]]
    k = min(n, 4)  # fewer measurements than terms: drop the highest-order terms
    coef, *_ = np.linalg.lstsq(np.stack(cols[:k], axis=1), grid[have], rcond=None)
    full = [np.ones(X.shape), X, Y, X * Y][:k]
    fitted = sum(c * f for c, f in zip(coef, full))
    out = grid.copy()
    out[missing] = np.maximum(fitted[missing], 0.0)
    return out


def _pava(y: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit of a sequence (pool adjacent violators, scipy)."""
    return isotonic_regression(y).x


def monotone_grid(grid: np.ndarray, rounds: int = 100) -> np.ndarray:
    """Non-decreasing along both axes: isotonic regression of rows and columns in turn
    until stable, then a running maximum for what tolerance left."""
    g = grid.astype(float).copy()
    for _ in range(rounds):
        before = g.copy()
        g = np.apply_along_axis(_pava, 1, g)
        g = np.apply_along_axis(_pava, 0, g)
        if np.allclose(g, before, rtol=0, atol=1e-12):
            break
    return np.maximum.accumulate(np.maximum.accumulate(g, axis=0), axis=1)


@dataclass(frozen=True)
class Table2D:
    """A monotone piecewise-bilinear function of (x, y) on a grid (see the module doc)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    values: np.ndarray  # len(xs) x len(ys), non-decreasing along both axes
    slope_x: np.ndarray  # len(ys): d/dx beyond the last x (non-negative, non-decreasing in y)
    slope_y: np.ndarray  # len(xs): d/dy beyond the last y (non-negative, non-decreasing in x)

    @classmethod
    def build(cls, xs: Sequence[float], ys: Sequence[float], seconds: Any, where: str) -> Table2D:
        xa, ya = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        grid = np.array([[math.nan if v is None else float(v) for v in row] for row in seconds], dtype=float)
        grid = _fill_missing(xa, ya, grid, where)
        grid = monotone_grid(grid)
        if len(xa) > 1:
            sx = np.maximum((grid[-1] - grid[-2]) / (xa[-1] - xa[-2]), 0.0)
        else:
            sx = np.zeros(len(ya))
        if len(ya) > 1:
            sy = np.maximum((grid[:, -1] - grid[:, -2]) / (ya[-1] - ya[-2]), 0.0)
        else:
            sy = np.zeros(len(xa))
        return cls(tuple(xa), tuple(ya), grid, np.maximum.accumulate(sx), np.maximum.accumulate(sy))

    @staticmethod
    def _locate(axis: tuple[float, ...], v: float) -> tuple[int, float, float]:
        """(cell index, weight in [0, 1], distance beyond the last point) of v on an axis."""
        if len(axis) == 1 or v <= axis[0]:
            return 0, 0.0, max(v - axis[-1], 0.0) if len(axis) == 1 else 0.0
        if v >= axis[-1]:
            return len(axis) - 2, 1.0, v - axis[-1]
        i = bisect.bisect_right(axis, v) - 1
        return i, (v - axis[i]) / (axis[i + 1] - axis[i]), 0.0

    @staticmethod
    def _lerp(vec: np.ndarray, i: int, t: float) -> float:
        if len(vec) == 1:
            return float(vec[0])
        return float(vec[i] + t * (vec[i + 1] - vec[i]))

    def __call__(self, x: float, y: float) -> float:
        i, t, dx = self._locate(self.xs, x)
        j, s, dy = self._locate(self.ys, y)
        g = self.values
        if len(self.xs) == 1 and len(self.ys) == 1:
            base = float(g[0, 0])
        elif len(self.xs) == 1:
            base = self._lerp(g[0], j, s)
        elif len(self.ys) == 1:
            base = self._lerp(g[:, 0], i, t)
        else:
            lo = g[i, j] + s * (g[i, j + 1] - g[i, j])
            hi = g[i + 1, j] + s * (g[i + 1, j + 1] - g[i + 1, j])
            base = float(lo + t * (hi - lo))
        if dx > 0:
            base += dx * self._lerp(self.slope_x, j, s)
        if dy > 0:
            base += dy * self._lerp(self.slope_y, i, t)
        return base


def _axis(where: str, v: Any, positive: bool) -> tuple[float, ...]:
    if not isinstance(v, list) or not v:
        raise ProfileError(f"{where} must be a non-empty list of numbers")
    try:
        xs = tuple(float(x) for x in v)
    except (TypeError, ValueError):
        raise ProfileError(f"{where} must be a list of numbers, got {v!r:.80}") from None
    if any(not math.isfinite(x) for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])):
        raise ProfileError(f"{where} must be finite and strictly ascending, got {list(xs)!r:.80}")
    if xs[0] < 0 or (positive and xs[0] <= 0):
        raise ProfileError(f"{where} must be {'positive' if positive else 'non-negative'}, got {xs[0]:g}")
    return xs


def _seconds(where: str, v: Any, rows: int, cols: int) -> list[list[float | None]]:
    if not isinstance(v, list) or len(v) != rows:
        raise ProfileError(f"{where} must be a list of {rows} rows (one per row axis value), got {_size(v)}")
    out = []
    for r, row in enumerate(v):
        if not isinstance(row, list) or len(row) != cols:
            raise ProfileError(f"{where}[{r}] must have {cols} values (one per column axis value), got {_size(row)}")
        for c, x in enumerate(row):
            if x is None:
                continue
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                raise ProfileError(f"{where}[{r}][{c}] must be a non-negative number or null, got {x!r}")
        out.append(list(row))
    if all(x is None for row in out for x in row):
        raise ProfileError(f"{where} has no measured value")
    return out


def _size(v: Any) -> str:
    return f"{len(v)}" if isinstance(v, list) else type(v).__name__


def _nonneg(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ProfileError(f"{where} must be a non-negative number, got {v!r}")
    return float(v)


def _table(data: Mapping[str, Any], name: str, xname: str, yname: str, where: str) -> Table2D:
    sec = data.get(name)
    if not isinstance(sec, Mapping):
        raise ProfileError(f"{where}: missing section '{name}'")
    xs = _axis(f"{where}: {name}.{xname}", sec.get(xname), positive=True)
    ys = _axis(f"{where}: {name}.{yname}", sec.get(yname), positive=(name == "decode"))
    secs = _seconds(f"{where}: {name}.seconds", sec.get("seconds"), len(xs), len(ys))
    return Table2D.build(xs, ys, secs, f"{where}: {name}.seconds")


class ProfileLatency(LatencyModel):
    """Iteration latency from a measured profile (module doc)."""

    def __init__(self, data: Mapping[str, Any], source: str = "profile") -> None:
        where = source
        if not isinstance(data, Mapping):
            raise ProfileError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ProfileError(f"{where}: 'format' must be '{FORMAT}', got {data.get('format')!r}")
        self.prefill_table = _table(data, "prefill", "extend_tokens", "prefix_tokens", where)
        self.decode_table = _table(data, "decode", "batch_size", "context_tokens", where)
        self.batch_shared_s = _nonneg(f"{where}: prefill_batch_shared_s", data.get("prefill_batch_shared_s", 0.0))
        over = data.get("overhead_s", {}) or {}
        if not isinstance(over, Mapping) or set(over) - {"prefill", "decode"}:
            raise ProfileError(f"{where}: overhead_s must be an object with keys prefill, decode")
        self.overhead_prefill_s = _nonneg(f"{where}: overhead_s.prefill", over.get("prefill", 0.0))
        self.overhead_decode_s = _nonneg(f"{where}: overhead_s.decode", over.get("decode", 0.0))
        trip = data.get("request_latency_s", {}) or {}
        keys = ("submit", "submit_per_token", "return", "dispatch", "dispatch_per_token")
        if not isinstance(trip, Mapping) or set(trip) - set(keys):
            raise ProfileError(f"{where}: request_latency_s must be an object with keys {', '.join(keys)}")
        # the client path of the measured server (seconds; the simulator's ClientPath)
        self.client_latency = {k: _nonneg(f"{where}: request_latency_s.{k}", trip[k]) for k in keys if k in trip}
        self.meta = dict(data.get("meta") or {})
        self.source = source

    @classmethod
    def from_file(cls, path: str | Path) -> ProfileLatency:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise ProfileError(f"latency profile {p}: cannot read it ({e.strerror or e})") from None
        except json.JSONDecodeError as e:
            raise ProfileError(f"latency profile {p}: not JSON ({e.msg} at line {e.lineno})") from None
        return cls(data, source=f"latency profile {p}")

    def prefill(self, batch: Sequence[ExtendItem]) -> float:
        alone = [self.prefill_table(e, p) for e, p in batch if e > 0]
        if not alone:
            return 0.0
        return max(sum(alone) - (len(alone) - 1) * self.batch_shared_s, max(alone)) + self.overhead_prefill_s

    def decode(self, batch_size: int, mean_context: int) -> float:
        if batch_size <= 0:
            return 0.0
        return self.decode_table(batch_size, max(mean_context, 1)) + self.overhead_decode_s


def build_profile(model: ModelSpec, gpu: GpuSpec, path: str | Path | None = None, **kw: Any) -> ProfileLatency:
    if kw:
        raise ValueError(f"latency model 'profile': unknown option(s) {sorted(kw)}")
    if not path:
        raise ProfileError("latency model 'profile' needs a file: set backend.latency_profile=<file> "
                           "(measure one with python -m topas.engines.sglang.tools.profiler)")
    return ProfileLatency.from_file(path)
