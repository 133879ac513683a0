"""Build a latency predictor by name (ModelSpec / GpuSpec loading: specs.py).

Kinds: "aiconfigurator" (measured SGLang tables), "roofline" (analytic), "profile" (a
measured server's file), "auto" (aiconfigurator when it has data for the GPU, else
roofline with a one-line warning; constructor keywords are not passed to the fallback).
The built-in predictors are registered here on first use (they do not import this module,
so there is no import cycle); more predictors join with the decorator::

    @register_latency_model("mine")
    def build_mine(model: ModelSpec, gpu: GpuSpec, **kw) -> LatencyModel: ...
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from topas.engines.latency.base import GpuSpec, LatencyModel, ModelSpec

log = logging.getLogger(__name__)

Builder = Callable[..., LatencyModel]
_REGISTRY: dict[str, Builder] = {}
_BUILTINS_LOADED = False
B = TypeVar("B", bound=Builder)


def register_latency_model(name: str) -> Callable[[B], B]:
    """Decorator: register ``builder(model, gpu, **kw) -> LatencyModel`` (a class works too)."""

    def deco(builder: B) -> B:
        if name in _REGISTRY or name == "auto":
            raise ValueError(f"latency model {name!r} is already registered")
        _REGISTRY[name] = builder
        return builder

    return deco


def available_latency_models() -> list[str]:
    _ensure_builtins()
    return sorted(_REGISTRY) + ["auto"]


def _ensure_builtins() -> None:
    # Imported lazily so that importing the factory stays cheap (aiconfigurator loads its tables).
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from topas.engines.latency.aiconfigurator import AiconfiguratorLatency
    from topas.engines.latency.measured import build_profile
    from topas.engines.latency.roofline import RooflineLatency

    for name, builder in (("aiconfigurator", AiconfiguratorLatency), ("roofline", RooflineLatency), ("profile", build_profile)):
        if name not in _REGISTRY:
            register_latency_model(name)(builder)


def build_latency_model(kind: str, model: ModelSpec, gpu: GpuSpec, **kw: Any) -> LatencyModel:
    """Predictor ``kind`` for ``model`` on ``gpu``; ``kw`` goes to its constructor."""
    _ensure_builtins()
    if kind == "auto":
        from topas.engines.latency.aiconfigurator import AiconfiguratorUnavailable

        try:
            return _REGISTRY["aiconfigurator"](model, gpu, **kw)
        except AiconfiguratorUnavailable as exc:
            log.warning("latency model: falling back to roofline (%s)", exc)
            return _REGISTRY["roofline"](model, gpu)
    if kind not in _REGISTRY:
        raise ValueError(f"unknown latency model kind {kind!r}; choose one of {available_latency_models()}")
    return _REGISTRY[kind](model, gpu, **kw)
