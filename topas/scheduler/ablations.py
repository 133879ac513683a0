"""The paper's ablations of TOPAS: subclasses that switch score components off by default."""

from __future__ import annotations

from dataclasses import dataclass

from topas.policy import register_policy
from topas.scheduler.topas import Topas, TopasParams


@register_policy("topas_base")
class TopasBase(Topas):
    """Ablation: no reuse value, no aging (the paper's TOPAS-base)."""

    @dataclass(frozen=True)
    class Params(TopasParams):
        use_reuse: bool = False
        use_aging: bool = False


@register_policy("topas_no_reuse")
class TopasNoReuse(Topas):
    @dataclass(frozen=True)
    class Params(TopasParams):
        use_reuse: bool = False


@register_policy("topas_no_aging")
class TopasNoAging(Topas):
    @dataclass(frozen=True)
    class Params(TopasParams):
        use_aging: bool = False
