"""What a policy returns at a scheduling point (docs/policy_contract.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Decision:
    """
    admit:    waiting requests to admit now, in order. The engine walks the list with
              SGLang's admission budget; a request that does not fit is skipped and the
              walk continues (`stop_at_first_misfit=False`, the contract), or the walk
              stops there (`True`: SGLang's own head-of-line semantics, used by the
              baselines that mirror SGLang's waiting-queue policies). Requests not listed
              stay waiting.
    pin:      agents whose prefix is kept resident (locked against eviction; loaded back
              from host if needed). `None` = no opinion: the engine's LRU decides.
    offload:  agents whose prefix is moved to the host tier now (if not in use).
    drop:     agents whose prefix is discarded from device and host now (if not in use).
    preempt:  running requests to preempt (back to waiting; generated tokens recomputed).
    """

    admit: tuple[str, ...] = ()
    pin: frozenset[str] | None = None
    offload: frozenset[str] = frozenset()
    drop: frozenset[str] = frozenset()
    preempt: tuple[str, ...] = ()
    stop_at_first_misfit: bool = False

    def __post_init__(self) -> None:
        if len(set(self.admit)) != len(self.admit):
            raise ValueError("decision admits a request twice")
        if self.pin is not None and (self.pin & (self.offload | self.drop)):
            raise ValueError(f"decision pins and evicts the same prefix: {sorted(self.pin & (self.offload | self.drop))}")
