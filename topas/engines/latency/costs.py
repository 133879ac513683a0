"""The policies' cost model (`topas.policy.CostModel`) backed by an iteration-latency model."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from topas.engines.latency.base import LatencyModel, decode_batch_time, top_context_means


def transfer_seconds(tokens: int, bytes_per_token: int, link_gbs: float, latency_s: float) -> float:
    """Host<->device KV transfer: fixed latency + bytes / effective bandwidth (docs/engine_model.md)."""
    if tokens <= 0:
        return 0.0
    return latency_s + tokens * bytes_per_token / (link_gbs * 1e9)


@dataclass(frozen=True)
class LatencyCostModel:
    latency: LatencyModel
    bytes_per_token: int
    link_gbs: float
    link_latency_s: float

    def prefill_time(self, extend_tokens: int, prefix_tokens: int = 0) -> float:
        if extend_tokens <= 0:
            return 0.0
        return self.latency.prefill([(extend_tokens, prefix_tokens)])

    def decode_step_time(self, batch_size: int, mean_context: int) -> float:
        # A homogeneous batch: non-decreasing in both arguments because every predictor is.
        return self.latency.decode(max(batch_size, 1), max(mean_context, 1))

    def decode_batch_step_time(self, contexts: Iterable[int]) -> float:
        """One decode step of a batch with these contexts, priced as the simulator prices it
        (`base.decode_batch_time`): adding a request never makes it cheaper."""
        return decode_batch_time(self.latency, top_context_means(max(c, 1) for c in contexts))

    def swap_time(self, tokens: int) -> float:
        return transfer_seconds(tokens, self.bytes_per_token, self.link_gbs, self.link_latency_s)
