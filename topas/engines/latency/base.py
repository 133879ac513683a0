"""Iteration-latency interface shared by the simulator and the policies' cost model.

A predictor answers "how long does one engine iteration take" for the two batch
kinds SGLang runs by default (no mixed chunk): an extend (prefill) batch and a
decode batch. Predictors: aiconfigurator-core (measured SGLang operator tables,
default), an analytic roofline (fallback), and a measured profile (fidelity).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence


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
