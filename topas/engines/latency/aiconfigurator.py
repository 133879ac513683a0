"""Iteration latency from aiconfigurator-core's measured SGLang operator tables.

``EngineHandle.compile(<dir with config.json>, system, "sglang")`` answers one
iteration in ms: ``predict_prefill_latency(bs, isl, prefix)`` (uniform batch: bs
requests each computing isl - prefix > 0 tokens after a cached prefix) and
``decode_step_latency(bs, ctx, osl=2)``. SGLang perf data in aiconfigurator-core
0.12.0: a100_sxm (tables from sglang 0.5.10), h100_sxm and h200_sxm (0.5.14); other
systems raise :class:`AiconfiguratorUnavailable` so the factory can fall back.

Heterogeneous extend batches [(e_i, p_i)] map to a uniform call with the same
request count n, the same computed tokens T = sum e_i (GEMMs exact) and the same
causal attention work W = sum e_i (p_i + e_i/2): e = T/n, p = W/T - e/2 (>= 0).

Why grids instead of raw calls: the raw tables are locally non-monotone (GEMM
table steps and noise: up to ~10% faster for one more token on h200, ~5% faster
after adding a request to a batch), and neither a cost model nor the simulator
should see "more work, less time". So each predictor is sampled once on a grid,
made monotone by a running max, and read by bilinear interpolation:
- decode: SGLang's captured CUDA-graph batch sizes (then eager sizes to 4096) x
  context at 2^(1/4) steps (~2k calls, ~20 ms). Batch sizes are padded up to the
  captured size, as SGLang pads them; the context is rounded up to ``ctx_quantum``.
- prefill: one slice per request count n in {1, 2, 3, 4, 6, ..., 512} over
  (T, W): T nodes on both sides of every GEMM table step (<= 256, then every 256),
  W at 2^(1/2) steps; W below what n requests can do (n e^2 / 2) is filled by a
  linear lower extension (same GEMMs, less attention). A query takes the max over
  slices <= n (more requests at equal T and W never help) and blends to the next
  slice, so adding a request, a token or a prefix token never makes it faster.
  Slices build lazily, up to the largest n seen (~50-100 ms each).
Every reference point of docs/engine_model.md ("Iteration latency") lies on a grid node (matches within 0.6%).
Against raw aiconfigurator on random uniform batches (n <= 13, T <= 8192, prefix
<= 30k): median 0.1-0.7%, p99 ~2%, worst +8% (flattened dips at < 64 tokens);
decode <= 4% (median 0).

Speed (``python -m topas.engines.latency.aiconfigurator``, Qwen2.5-32B / A100,
this CPU): compile + grids 1.3 s; then ~1.3M decode and ~1.7M 4-request prefill
predictions/s when memoised, ~66k/s for unseen prefill batches (interpolation).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from topas.engines.latency.base import ExtendItem, GpuSpec, LatencyModel, ModelSpec


class AiconfiguratorUnavailable(RuntimeError):
    """aiconfigurator-core is missing or has no SGLang data for the requested system."""


# Token counts where aiconfigurator's GEMM tables step (measured sizes; above 256 every 256).
_GEMM_BREAKS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256]
_SLOPE_PREFIX = 4096  # prefix used to measure attention cost per (query, key) pair


def _geometric(lo: float, hi: float, steps_per_octave: int) -> list[int]:
    """Integers lo * 2^(k/steps) up to hi, rounded and deduplicated (powers of two exact)."""
    n = int(round(math.log2(hi / lo) * steps_per_octave))
    return sorted({int(round(lo * 2 ** (k / steps_per_octave))) for k in range(n + 1)})


def decode_graph_batch_sizes(max_bs: int) -> list[int]:
    """sglang ``generate_decode_cuda_graph_batch_sizes`` (no speculative decoding)."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    return [s for s in sizes if s <= max_bs]


def sglang_systems() -> list[str]:
    """aiconfigurator systems that ship SGLang gemm and attention tables."""
    try:
        import aiconfigurator_core
    except ImportError:
        return []
    data = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    return sorted(
        p.name for p in data.iterdir() if (p / "gemm" / "sglang").is_dir() and (p / "attention" / "sglang").is_dir()
    )


@contextlib.contextmanager
def _quiet(name: str = "aiconfigurator_core") -> Iterator[None]:
    """aiconfigurator logs version/fallback notes at WARNING on every compile."""
    log = logging.getLogger(name)
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(old)


def _axis_pos(axis: Sequence[float], x: float) -> tuple[int, float]:
    """Segment index and fraction of x on an increasing axis, clamped to the axis."""
    if x <= axis[0] or len(axis) == 1:
        return 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 2, 1.0
    i = bisect.bisect_right(axis, x) - 1
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


class _Grid2:
    """Monotone (running max along both axes) table with bilinear interpolation.

    Past the last node each axis extrapolates with one constant slope (the steepest last
    segment along that edge), which keeps the extrapolation monotone too.
    """

    def __init__(self, xs: Sequence[float], ys: Sequence[float], raw: np.ndarray) -> None:
        g = np.maximum.accumulate(np.maximum.accumulate(raw, axis=0), axis=1)
        self.xs, self.ys, self.g = list(xs), list(ys), g
        self.sx = float((g[-1] - g[-2]).max() / (xs[-1] - xs[-2])) if len(xs) > 1 else 0.0
        self.sy = float((g[:, -1] - g[:, -2]).max() / (ys[-1] - ys[-2])) if len(ys) > 1 else 0.0

    def __call__(self, x: float, y: float) -> float:
        g = self.g
        i, fi = _axis_pos(self.xs, x)
        j, fj = _axis_pos(self.ys, y)
        v0 = g[i, j] + (g[i, j + 1] - g[i, j]) * fj
        v1 = g[i + 1, j] + (g[i + 1, j + 1] - g[i + 1, j]) * fj
        v = float(v0 + (v1 - v0) * fi)
        return v + self.sx * max(0.0, x - self.xs[-1]) + self.sy * max(0.0, y - self.ys[-1])


class AiconfiguratorLatency(LatencyModel):
    """Seconds per SGLang iteration from aiconfigurator-core (monotone, memoised)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        *,
        system: str | None = None,
        model_dir: str | Path | None = None,
        ctx_quantum: int = 64,
        pad_decode_to_cuda_graph: bool = True,
        max_context: int | None = None,
        max_extend: int = 16384,
        cache_size: int = 1 << 18,
    ) -> None:
        from topas.engines.latency.specs import resolve_hf_config

        self.model, self.gpu = model, gpu
        self.system = system or gpu.aic_system
        systems = sglang_systems()
        if not self.system or self.system not in systems:
            raise AiconfiguratorUnavailable(
                f"aiconfigurator-core has no SGLang data for system {self.system!r} (gpu {gpu.name});"
                f" available: {systems or 'none (package missing)'}"
            )
        path = Path(model_dir) if model_dir else resolve_hf_config(model).parent
        if not (path / "config.json").is_file():
            raise AiconfiguratorUnavailable(f"no config.json in {path} for model {model.name}")
        from aiconfigurator_core.sdk.engine import EngineHandle

        with _quiet():
            try:
                self._h = EngineHandle.compile(str(path), self.system, "sglang")
            except Exception as exc:  # aiconfigurator raises ValueError for missing data
                raise AiconfiguratorUnavailable(f"aiconfigurator compile failed for {model.name} on {self.system}: {exc}") from exc
        self.ctx_quantum = ctx_quantum
        top_ctx = max(max_context or model.context_len, 4096)
        # Decode grid: SGLang's captured batch sizes, then eager sizes up to 4096.
        graph_bs = decode_graph_batch_sizes(gpu.cuda_graph_max_bs)
        self._graph_bs = graph_bs if pad_decode_to_cuda_graph else []
        tail = [b for b in (320, 384, 448, 512, 768, 1024, 1536, 2048, 3072, 4096) if b > graph_bs[-1]]
        self._dec_bs = [float(b) for b in graph_bs + tail]
        self._dec_ctx = [1.0] + [float(c) for c in _geometric(64, top_ctx, 4)]
        self._dec_grid: _Grid2 | None = None
        # Prefill: one slice per request count n, axes (computed tokens T, attention work W).
        self._pf_n = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0]
        self._pf_breaks = _GEMM_BREAKS + list(range(512, max_extend + 1, 256))
        self._pf_w = [float(w) for w in _geometric(1, max_extend * top_ctx, 2)]
        self._top_ctx = top_ctx
        self._pf_slices: list[_Grid2] = []
        self._decode_cached: Callable[[int, int], float] = lru_cache(maxsize=cache_size)(self._decode_uncached)
        self._prefill_cached: Callable[[int, int, int], float] = lru_cache(maxsize=cache_size)(self._prefill_uncached)

    # ---- raw aiconfigurator (ms) -------------------------------------------------------
    def raw_prefill_ms(self, bs: int, extend: int, prefix: int) -> float:
        return self._h.predict_prefill_latency(int(bs), int(prefix + extend), int(prefix))

    def raw_decode_ms(self, bs: int, ctx: int) -> float:
        return self._h.decode_step_latency(int(bs), int(ctx), 2)

    # ---- grids --------------------------------------------------------------------------
    def _decode_table(self) -> _Grid2:
        if self._dec_grid is None:
            raw = np.array([[self.raw_decode_ms(int(b), int(c)) for c in self._dec_ctx] for b in self._dec_bs])
            self._dec_grid = _Grid2(self._dec_bs, self._dec_ctx, raw)
        return self._dec_grid

    def _prefill_slice(self, k: int) -> _Grid2:
        while len(self._pf_slices) <= k:  # in order: the envelope over n reads the smaller slices
            n = int(self._pf_n[len(self._pf_slices)])
            # Token nodes on both sides of every table breakpoint b: n * floor(b/n) <= b < n * (floor(b/n) + 1).
            extends = sorted({max(1, b // n + d) for b in self._pf_breaks for d in (0, 1)})
            rows = []
            for e in extends:
                memo: dict[int, float] = {}
                base = self.raw_prefill_ms(n, e, 0)
                w_min = n * e * e / 2  # least attention work n requests of e fresh tokens can do
                # Attention ms per (query, key) pair, measured with a cached prefix.
                slope = max(0.0, (self.raw_prefill_ms(n, e, _SLOPE_PREFIX) - base) / (n * e * _SLOPE_PREFIX))
                row = []
                for w in self._pf_w:
                    if w < w_min:
                        # Infeasible for n requests: extend linearly below (same GEMMs, less attention),
                        # a lower estimate, so the envelope over n below stays honest.
                        row.append(max(0.0, base - slope * (w_min - w)))
                        continue
                    p = min(self._top_ctx, round(w / (n * e) - e / 2))  # W = n e (p + e/2)
                    if p not in memo:
                        memo[p] = self.raw_prefill_ms(n, e, p)
                    row.append(memo[p])
                rows.append(row)
            self._pf_slices.append(_Grid2([float(n * e) for e in extends], self._pf_w, np.array(rows)))
        return self._pf_slices[k]

    def _decode_uncached(self, bs: int, ctx: int) -> float:
        return self._decode_table()(bs, ctx) / 1e3

    def _slice_value(self, k: int, total: float, work: float) -> float:
        return self._prefill_slice(k)(total, work)

    def _prefill_uncached(self, n: int, total: int, work: int) -> float:
        # Envelope over request counts: with tokens and attention work fixed, more requests
        # never help (per-request logits and metadata), so take the max over smaller slices;
        # between slices, blend. Monotone in n, tokens and work, hence adding a request never helps.
        k, fk = _axis_pos(self._pf_n, n)
        v = max(self._slice_value(j, total, work) for j in range(k + 1))
        if fk > 0.0:
            v0, v1 = self._slice_value(k, total, work), self._slice_value(k + 1, total, work)
            v = max(v, v0 + (v1 - v0) * fk)
        return v / 1e3

    # ---- LatencyModel -------------------------------------------------------------------
    def prefill(self, batch: Sequence[ExtendItem]) -> float:
        n = total = work2 = 0
        for e, p in batch:
            if e > 0:
                n += 1
                total += e
                work2 += e * (2 * p + e)  # 2 x causal attention work, kept integral for the cache key
        if n == 0:
            return 0.0
        return self._prefill_cached(n, total, work2 // 2)

    def decode(self, batch_size: int, mean_context: int) -> float:
        if batch_size <= 0:
            return 0.0
        bs = int(batch_size)
        if self._graph_bs and bs <= self._graph_bs[-1]:
            bs = self._graph_bs[bisect.bisect_left(self._graph_bs, bs)]  # SGLang pads to a captured graph
        q = self.ctx_quantum
        ctx = max(q, -(-int(mean_context) // q) * q)
        return self._decode_cached(bs, ctx)

    def cache_info(self) -> dict[str, object]:
        return {"decode": self._decode_cached.cache_info(), "prefill": self._prefill_cached.cache_info()}  # type: ignore[attr-defined]


def _bench() -> None:  # pragma: no cover - prints predictions/s after warm-up
    import random
    import time

    import yaml

    from topas.engines.latency.specs import load_gpu_spec, load_model_spec, repo_conf_dir

    conf = repo_conf_dir()
    m = load_model_spec(yaml.safe_load((conf / "model/qwen2_5_32b.yaml").read_text()))
    g = load_gpu_spec(yaml.safe_load((conf / "gpu/a100_80gb.yaml").read_text()))
    rng = random.Random(0)

    def batches() -> tuple[list[tuple[int, int]], list[list[tuple[int, int]]]]:
        dec = [(rng.randint(1, 256), rng.randint(1, 32768)) for _ in range(100_000)]
        pre = [[(rng.randint(1, 2048), rng.randint(0, 16384)) for _ in range(4)] for _ in range(20_000)]
        return dec, pre

    t0 = time.perf_counter()
    lat = AiconfiguratorLatency(m, g)
    warm_dec, warm_pre = batches()
    for b, c in warm_dec:
        lat.decode(b, c)
    for batch in warm_pre:
        lat.prefill(batch)
    print(f"compile + grids + warm-up: {time.perf_counter() - t0:.2f}s")
    for label, (dec, pre) in (("cached", (warm_dec, warm_pre)), ("new inputs", batches())):
        t0 = time.perf_counter()
        for b, c in dec:
            lat.decode(b, c)
        t1 = time.perf_counter()
        for batch in pre:
            lat.prefill(batch)
        t2 = time.perf_counter()
        print(f"{label}: decode {len(dec) / (t1 - t0):,.0f}/s, prefill (4 requests) {len(pre) / (t2 - t1):,.0f}/s")


if __name__ == "__main__":  # pragma: no cover
    _bench()
