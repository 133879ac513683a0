"""TOPAS's ablations: the paper's (base, no reuse, no aging) and one per score term of our own (no context, no
remaining-work factor), subclasses that switch a component off by default."""

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


@register_policy("topas_no_context")
class TopasNoContext(Topas):
    """Ablation (ours, not the paper's): no context value in J_admit (docs/decisions/0027)."""

    @dataclass(frozen=True)
    class Params(TopasParams):
        use_context: bool = False


@register_policy("topas_no_remaining_work")
class TopasNoRemainingWork(Topas):
    """Ablation (ours, not the paper's): no remaining-work factor in the task weights (docs/decisions/0033)."""

    @dataclass(frozen=True)
    class Params(TopasParams):
        use_remaining_work: bool = False
