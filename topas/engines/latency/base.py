"""Iteration-latency interface shared by the simulator and the policies' cost model.

A predictor answers "how long does one engine iteration take" for the two batch
kinds SGLang runs by default (no mixed chunk): an extend (prefill) batch and a
decode batch. Predictors: aiconfigurator-core (measured SGLang operator tables,
default), an analytic roofline (fallback), and a measured profile (fidelity).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """Transformer shape (HF config names) plus what the cost models need."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    params_b: float  # parameters, billions
    dtype_bytes: int = 2
    context_len: int = 32768
    hf_config: str = ""  # path (package-relative) of an HF config.json for aiconfigurator / sglang

    @property
    def kv_bytes_per_token(self) -> int:
        """mu = 2 (K and V) x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * self.dtype_bytes


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gib: float  # device memory as the driver reports it
    peak_tflops: float  # dense bf16
    mem_bw_gbs: float  # HBM bandwidth, GB/s
    host_link_gbs: float  # effective host<->device bandwidth, GB/s
    host_link_latency_s: float = 5e-6  # fixed cost per transfer
    aic_system: str = ""  # aiconfigurator system name (e.g. a100_sxm)
    cuda_graph_max_bs: int = 256


# One request's share of an extend batch: (tokens to compute, tokens already cached before them).
ExtendItem = tuple[int, int]


class LatencyModel(ABC):
    """Seconds per engine iteration."""

    @abstractmethod
    def prefill(self, batch: Sequence[ExtendItem]) -> float:
        """One extend iteration computing `extend` new tokens per request after `prefix` cached ones."""

    @abstractmethod
    def decode(self, batch_size: int, mean_context: int) -> float:
        """One decode iteration: `batch_size` requests, each attending to ~`mean_context` tokens."""


# ---- decode steps of heterogeneous batches ----------------------------------------------------
#
# A predictor prices a decode step by (batch size, mean context). Read naively, a long request
# batched with a short one would run faster than alone (aiconfigurator, Qwen2.5-32B / A100:
# decode(2, 6470) < decode(1, 11940)): adding work made the step cheaper. Every caller that
# prices a real batch goes through `decode_batch_time`, the envelope
#
#     t(S) = max over k = 1..|S| of decode(k, floor(mean of the k longest contexts of S)).
#
# Monotone: adding a request r to S raises (or keeps) the mean of the k longest for every k
# (the k largest of S u {r} dominate the k largest of S elementwise) and adds a term k = |S| + 1,
# so with decode non-decreasing in the context for each batch size (and floor non-decreasing),
# t(S u {r}) >= t(S); and t(S) >= decode(1, max S) >= t({c}) for every c in S. Monotonicity in
# the batch size is not needed. Every built-in predictor is non-decreasing in both arguments
# (tests/test_decode_monotone.py), so no running max is needed on top.
# Where decode(|S|, mean) is already the largest term (most aiconfigurator batches; an additive
# model such as the roofline, up to the rounding of the mean) it is the plain (batch size, mean) price.


def top_context_means(contexts: Iterable[int]) -> list[float]:
    """Mean of the k longest contexts, k = 1..n (non-increasing in k)."""
    means: list[float] = []
    total = 0
    for k, c in enumerate(sorted(contexts, reverse=True), 1):
        total += c
        means.append(total / k)
    return means


def decode_batch_time(latency: LatencyModel, means: Sequence[float], steps_ahead: int = 0) -> float:
    """One decode step of a batch whose `top_context_means` are `means`, `steps_ahead` steps on
    (every context grows by one per step): max_k decode(k, floor(means[k-1]) + steps_ahead)."""
    decode = latency.decode
    best = 0.0
    k = 0
    for m in means:  # a plain loop: this runs several times per simulated decode stretch
        k += 1
        t = decode(k, int(m) + steps_ahead)
        if t > best:
            best = t
    return best
