"""ModelSpec / GpuSpec from configs (conf/model, conf/gpu) and from HF config.json files.

Kept apart from the predictor registry (factory.py) so that predictors can load specs
without importing the registry that imports them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from topas.checks import check_range, integral, number
from topas.engines.latency.base import GpuSpec, ModelSpec

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # .../topas


def _plain(mapping: Any) -> dict[str, Any]:
    try:  # OmegaConf DictConfig -> dict (resolving interpolations)
        from omegaconf import DictConfig, OmegaConf

        if isinstance(mapping, DictConfig):
            return dict(OmegaConf.to_container(mapping, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(mapping, Mapping):
        raise TypeError(f"expected a mapping, got {type(mapping).__name__}")
    return dict(mapping)


# Ranges of the spec fields (topas.checks rules); an int field also accepts an integral float (64.0).
SPEC_RANGES: dict[type, dict[str, str]] = {
    ModelSpec: {
        "num_layers": ">= 1", "hidden_size": ">= 1", "num_heads": ">= 1", "num_kv_heads": ">= 1", "head_dim": ">= 1",
        "intermediate_size": ">= 1", "vocab_size": ">= 1", "params_b": "> 0", "dtype_bytes": ">= 1",
        "context_len": ">= 1",
    },
    GpuSpec: {
        "memory_gib": "> 0", "peak_tflops": "> 0", "mem_bw_gbs": "> 0", "host_link_gbs": "> 0",
        "host_link_latency_s": ">= 0", "cuda_graph_max_bs": ">= 1",
    },
}


def _field_value(key: str, kind: Any, rule: str | None, v: Any) -> Any:
    if kind in (int, "int"):
        n = integral(key, v, minimum=None)
        if rule is not None:
            check_range(key, n, rule)
        return n
    if kind in (float, "float"):
        return number(key, v, rule)
    if kind in (str, "str") and not isinstance(v, str):
        raise ValueError(f"{key} must be a string, got {v!r}")
    return v


def _build(cls: type, mapping: Any, key: str) -> Any:
    data = _plain(mapping)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{key} ({cls.__name__}): unknown key(s) {unknown}; allowed: {sorted(names)}")
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ValueError(f"{key} ({cls.__name__}): missing key(s) {missing}")
    ranges = SPEC_RANGES.get(cls, {})
    kinds = {f.name: f.type for f in dataclasses.fields(cls)}
    values = {k: _field_value(f"{key}.{k}", kinds[k], ranges.get(k), v) for k, v in data.items()}
    return cls(**values)


def load_model_spec(mapping: Any, key: str = "model") -> ModelSpec:
    """ModelSpec from a dict / OmegaConf node (conf/model/*.yaml); an unknown key, a wrong type or a
    value out of range (SPEC_RANGES) is a one-line ValueError naming `<key>.<field>`."""
    return _build(ModelSpec, mapping, key)


def load_gpu_spec(mapping: Any, key: str = "gpu") -> GpuSpec:
    """GpuSpec from a dict / OmegaConf node (conf/gpu/*.yaml); checked as `load_model_spec`."""
    return _build(GpuSpec, mapping, key)


def resolve_hf_config(model: ModelSpec) -> Path:
    """Absolute path of the model's HF config.json (``hf_config`` is relative to the topas package)."""
    if not model.hf_config:
        raise ValueError(f"model {model.name} has no hf_config")
    p = Path(model.hf_config)
    return p if p.is_absolute() else PACKAGE_ROOT / p


def model_spec_from_hf_config(path: str | Path, name: str, context_len: int | None = None) -> ModelSpec:
    """ModelSpec from an HF config.json (dense decoder: Llama / Qwen2); params counted from shapes."""
    cfg = json.loads(Path(path).read_text())
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // heads
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    bias = cfg.get("model_type") == "qwen2" or cfg.get("attention_bias", False)  # Qwen2 has q/k/v biases
    per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter + 2 * h
    per_layer += (heads * hd + 2 * kv * hd) if bias else 0
    params = layers * per_layer + vocab * h * (1 if cfg.get("tie_word_embeddings") else 2) + h
    resolved = Path(path).resolve()
    return ModelSpec(
        name=name, num_layers=layers, hidden_size=h, num_heads=heads, num_kv_heads=kv, head_dim=hd,
        intermediate_size=inter, vocab_size=vocab, params_b=round(params / 1e9, 2),
        context_len=context_len or cfg.get("max_position_embeddings", 32768),
        hf_config=str(resolved.relative_to(PACKAGE_ROOT)) if resolved.is_relative_to(PACKAGE_ROOT) else str(path),
    )


def repo_conf_dir() -> Path:
    """conf/ of a source checkout (editable install); not shipped in the wheel."""
    return PACKAGE_ROOT.parent / "conf"
