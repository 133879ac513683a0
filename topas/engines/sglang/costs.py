"""The cost model the SGLang plugin hands to policies (`topas.policy.view.CostModel`).

A small linear model with explicit parameters: SGLang itself has no latency model,
and on a real GPU the launcher should pass figures from the project's latency
predictor (`TOPAS_COST_MODEL` JSON, written by the launcher). The defaults below were
measured on the 2-core CPU test machine with the tiny Qwen2 model
(`models/tiny_cpu`), so that the CPU end-to-end tests see plausible numbers; they
mean nothing for a GPU run. `bytes_per_token` is always read off the served model
(2 x layers x kv_heads x head_dim x dtype bytes) unless the JSON overrides it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_COST_MODEL = "TOPAS_COST_MODEL"  # JSON object or a path to a JSON file


@dataclass(frozen=True)
class LinearCostModel:
    bytes_per_token: int = 2 * 2 * 2 * 32 * 2  # tiny_cpu: 2 layers, 2 kv heads, head_dim 32, bf16
    prefill_tokens_per_s: float = 4000.0
    prefill_base_s: float = 0.005
    decode_base_s: float = 0.010
    decode_per_seq_s: float = 0.0005
    decode_per_ctx_token_s: float = 0.0
    swap_bandwidth_bytes_per_s: float = 10e9
    swap_latency_s: float = 5e-6
    swap_efficiency: float = 1.0

    def prefill_time(self, extend_tokens: int, prefix_tokens: int = 0) -> float:
        if extend_tokens <= 0:
            return 0.0
        return self.prefill_base_s + extend_tokens / self.prefill_tokens_per_s

    def decode_step_time(self, batch_size: int, mean_context: int) -> float:
        if batch_size <= 0:
            return 0.0
        return (
            self.decode_base_s
            + self.decode_per_seq_s * batch_size
            + self.decode_per_ctx_token_s * batch_size * max(mean_context, 0)
        )

    def swap_time(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return self.swap_latency_s + tokens * self.bytes_per_token / (
            self.swap_efficiency * self.swap_bandwidth_bytes_per_s
        )


def kv_bytes_per_token(model_config: Any) -> int | None:
    """2 x layers x kv_heads x head_dim x dtype bytes of an SGLang `ModelConfig`, or None."""
    try:
        import torch

        layers = int(model_config.num_hidden_layers)
        kv_heads = int(model_config.get_total_num_kv_heads())
        head_dim = int(model_config.head_dim)
        dtype_bytes = torch.empty((), dtype=model_config.dtype).element_size()
        return 2 * layers * kv_heads * head_dim * dtype_bytes
    except Exception:  # noqa: BLE001 - a model config without these: let the caller keep its default
        return None


def load_cost_model(spec: str | Mapping[str, Any] | None = None, model_config: Any = None) -> Any:
    """Cost model from a JSON object / JSON file path / mapping (unknown keys: one-line error).

    `LinearCostModel` fields, or `{"latency_profile": <file>}` (+ optional `bytes_per_token`,
    `swap_bandwidth_bytes_per_s`, `swap_latency_s`): the policy then sees the measured
    profile's predictions (`LatencyCostModel` over `topas.engines.latency.measured`), exactly
    what a simulator run with `backend.latency=profile` on that file hands its policies."""
    spec = os.environ.get(ENV_COST_MODEL) if spec is None else spec
    values: dict[str, Any] = {}
    if isinstance(spec, Mapping):
        values = dict(spec)
    elif spec:
        text = spec.strip()
        if not text.startswith("{"):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        values = json.loads(text)
    if "bytes_per_token" not in values and model_config is not None:
        mu = kv_bytes_per_token(model_config)
        if mu:
            values["bytes_per_token"] = mu
    if "latency_profile" in values:
        return _profile_cost_model(values)
    known = {f.name for f in dataclasses.fields(LinearCostModel)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{ENV_COST_MODEL}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return LinearCostModel(**values)


def _profile_cost_model(values: dict[str, Any]) -> Any:
    from topas.engines.latency.costs import LatencyCostModel
    from topas.engines.latency.measured import ProfileLatency

    known = {"latency_profile", "bytes_per_token", "swap_bandwidth_bytes_per_s", "swap_latency_s"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{ENV_COST_MODEL}: with latency_profile, unknown key(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    return LatencyCostModel(
        latency=ProfileLatency.from_file(values["latency_profile"]),
        bytes_per_token=int(values.get("bytes_per_token", LinearCostModel.bytes_per_token)),
        link_gbs=float(values.get("swap_bandwidth_bytes_per_s", LinearCostModel.swap_bandwidth_bytes_per_s)) / 1e9,
        link_latency_s=float(values.get("swap_latency_s", LinearCostModel.swap_latency_s)),
    )
